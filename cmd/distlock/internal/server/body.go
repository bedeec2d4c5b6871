package server

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"connectrpc.com/connect"
)

// errTooLarge is the error of a request body over Limits.MaxRequestBytes.
type errTooLarge struct{ msg string }

func (e errTooLarge) Error() string { return e.msg }

// unaryConnect reports whether r is a call in Connect's unary protocol, the
// one plain HTTP clients use: a POST of JSON or protobuf. gRPC, gRPC-Web and
// Connect streams frame their messages, and Connect bounds each message.
func unaryConnect(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return ct == "application/json" || ct == "application/proto"
}

// boundBody reads the body of a unary Connect call into memory if its size
// is not declared or it is compressed, so that a body over max is refused
// with HTTP 413 before Connect sees it: Connect answers 429, the rate-limit
// status, which clients retry. A gzip body is inflated up to max and no
// further, and r goes on with the inflated body.
func boundBody(r *http.Request, max int) error {
	gz := r.Header.Get("Content-Encoding") == "gzip"
	if r.ContentLength > int64(max) {
		return errTooLarge{fmt.Sprintf("request body of %d bytes is over the limit of %d bytes", r.ContentLength, max)}
	}
	if r.ContentLength >= 0 && !gz {
		return nil // net/http ends the body at its declared length
	}
	raw := &io.LimitedReader{R: r.Body, N: int64(max) + 1}
	body := io.Reader(raw)
	if gz {
		zr, err := gzip.NewReader(raw)
		if err != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("request body: gzip: %w", err))
		}
		body = io.LimitReader(zr, int64(max)+1)
	}
	buf := new(bytes.Buffer)
	n, err := buf.ReadFrom(body)
	switch {
	case raw.N <= 0:
		return errTooLarge{fmt.Sprintf("request body is over the limit of %d bytes", max)}
	case n > int64(max):
		return errTooLarge{fmt.Sprintf("request body inflates past the limit of %d bytes", max)}
	case err != nil:
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("request body: %w", err))
	}
	r.Header.Del("Content-Encoding")
	r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	r.ContentLength = int64(buf.Len())
	r.Header.Set("Content-Length", strconv.Itoa(buf.Len()))
	return nil
}

// writeTooLarge answers a unary Connect call with HTTP 413 and a Connect
// error body, so Connect clients read resource_exhausted and plain HTTP
// clients do not retry.
func writeTooLarge(w http.ResponseWriter, r *http.Request, err errTooLarge) {
	body, _ := json.Marshal(map[string]string{"code": connect.CodeResourceExhausted.String(), "message": err.msg})
	w.Header().Set("Content-Type", "application/json")
	if r.ProtoMajor == 1 {
		// Without it net/http reads what is left of the body before it
		// answers, however long the caller takes to send it.
		w.Header().Set("Connection", "close")
	}
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	_, _ = w.Write(body)
}

// boundedGzip is Connect's gzip decompressor, except that it fails once it
// has produced one byte more than the message limit: Connect's own inflates
// a message over the limit to its end to report its size, a second of CPU
// for a small gzip of a gigabyte.
type boundedGzip struct {
	gzip.Reader
	max, left int64
}

// newBoundedGzip returns the decompressor for messages of at most max bytes.
func newBoundedGzip(max int) func() connect.Decompressor {
	return func() connect.Decompressor { return &boundedGzip{max: int64(max)} }
}

// Read inflates up to the limit and one byte more, then fails.
func (d *boundedGzip) Read(p []byte) (int, error) {
	if d.left <= 0 {
		return 0, fmt.Errorf("the message inflates past the limit of %d bytes", d.max)
	}
	if int64(len(p)) > d.left {
		p = p[:d.left]
	}
	n, err := d.Reader.Read(p)
	d.left -= int64(n)
	return n, err
}

// Reset starts on a new message.
func (d *boundedGzip) Reset(r io.Reader) error {
	d.left = d.max + 1
	return d.Reader.Reset(r)
}
