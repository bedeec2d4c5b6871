package server_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// An oversized body is answered 413 with resource_exhausted, not 429: a
// client that retries on 429 would send it again for ever. The size is
// judged by the declared length, by the bytes that arrive when none is
// declared, and by the inflated size of a compressed body, which is never
// inflated past the limit.
func TestOversizedBody(t *testing.T) {
	e := newEnv(t, stores(t)[1], server.Limits{MaxRequestBytes: 64 << 10})
	key := keyFor(t, "k")
	big := `{"key":"` + key + strings.Repeat("x", 1<<20) + `"}`
	zeros := gzipped(t, 4<<20)

	post := func(t *testing.T, body io.Reader, length int64, header http.Header) (int, string, string) {
		t.Helper()
		header.Set("Content-Type", "application/json")
		header.Set("Authorization", "Bearer "+alphaClient)
		return e.post(t, distlockv1connect.LockServiceAcquireProcedure, body, length, header)
	}
	for _, c := range []struct {
		name    string
		body    func() io.Reader
		length  int64
		header  http.Header
		message string
	}{
		{"declared length", func() io.Reader { return strings.NewReader(big) }, int64(len(big)), http.Header{}, "request body of 1048"},
		{"no declared length", func() io.Reader { return io.MultiReader(strings.NewReader(big)) }, -1, http.Header{}, "request body is over"},
		{"gzip of 4 MiB", func() io.Reader { return bytes.NewReader(zeros) }, int64(len(zeros)), http.Header{"Content-Encoding": {"gzip"}}, "inflates past"},
		{"gzip sent without end", func() io.Reader {
			// The first 4 MiB inflated, then nothing more: the answer must
			// come without the rest of the body.
			r, w := io.Pipe()
			stop := make(chan struct{})
			go func() {
				_, _ = w.Write(zeros[:len(zeros)-64])
				<-stop
				w.Close()
			}()
			t.Cleanup(func() { close(stop); r.Close() })
			return r
		}, -1, http.Header{"Content-Encoding": {"gzip"}}, "inflates past"},
	} {
		t.Run(c.name, func(t *testing.T) {
			status, code, msg := post(t, c.body(), c.length, c.header)
			if status != http.StatusRequestEntityTooLarge || code != "resource_exhausted" || !strings.Contains(msg, c.message) || !strings.Contains(msg, "65536") {
				t.Errorf("HTTP %d %s %q, want HTTP 413 resource_exhausted naming %q and the limit 65536", status, code, msg, c.message)
			}
		})
	}
	// gRPC frames its messages: Connect bounds each, and a compressed one
	// is not inflated past the limit.
	grpc := e.api(alphaClient, connect.WithGRPC(), connect.WithSendCompression("gzip"))
	var small []byte
	_, err := grpc.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: key + strings.Repeat("x", 4<<20)}))
	wantCode(t, "a gzip message of 4 MiB over gRPC", err, connect.CodeResourceExhausted)
	if err == nil || !strings.Contains(err.Error(), "inflates past the limit of 65536 bytes") {
		t.Errorf("a gzip message of 4 MiB over gRPC: %v, want it to say it inflates past the limit", err)
	}
	if l := inspect(t, e.api(alphaClient), key); l.GetHeld() {
		t.Errorf("an oversized request took the key: %v", l)
	}
	// A compressed request within the limit is served.
	small, err = json.Marshal(map[string]string{"key": key})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(small)
	_ = zw.Close()
	if status, code, msg := post(t, &buf, int64(buf.Len()), http.Header{"Content-Encoding": {"gzip"}}); status != http.StatusOK {
		t.Errorf("a small gzip request: HTTP %d %s %q", status, code, msg)
	}
}

// gzipped returns the gzip of n zero bytes.
func gzipped(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := zw.Write(make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
