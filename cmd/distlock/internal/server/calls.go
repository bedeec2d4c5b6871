package server

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
)

// call is what the access log and the metrics record of one RPC. The guard
// creates it; the handler names the key (noteKey); the outcome interceptor
// sets the code. All of it happens on the call's own goroutine.
type call struct {
	method string
	start  time.Time
	id     auth.Identity
	key    string // the client key, or List's and Watch's prefix
	code   string // "ok" or a Connect code; "" until known
	// live sends the response headers at once, with a header saying so
	// (Watch, once it has read the store).
	live func()
}

func newCall(method string) *call { return &call{method: method, start: time.Now()} }

type callKey struct{}

func withCall(ctx context.Context, c *call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// callOf returns the call of ctx. Every RPC's context has one: the guard
// wraps the whole API.
func callOf(ctx context.Context) *call {
	return ctx.Value(callKey{}).(*call)
}

// noteKey records the key a call is about, for the access log.
func noteKey(ctx context.Context, key string) { callOf(ctx).key = key }

// finish logs c and counts it in the metrics.
func (s *Server) finish(c *call) {
	d := time.Since(c.start)
	s.metrics.observe(c.method, c.code, d)
	level := slog.LevelInfo
	if c.code == connect.CodeInternal.String() || c.code == connect.CodeUnknown.String() {
		level = slog.LevelError
	}
	s.log.LogAttrs(context.Background(), level, "call",
		slog.String("method", c.method),
		slog.String("tenant", c.id.Tenant),
		slog.String("key", c.key),
		slog.String("code", c.code),
		slog.Duration("duration", d),
	)
}

// codeOkay is the code of a call that succeeded.
const codeOkay = "ok"

// codeOf names err's code as the metrics and logs do.
func codeOf(err error) string {
	if err == nil {
		return codeOkay
	}
	return connect.CodeOf(err).String()
}

// outcome is the interceptor that records each call's code.
type outcome struct{}

// WrapUnary records the code of a unary call.
func (outcome) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if ended, ok := endedBy(ctx); ok && err != nil {
			err = ended
		}
		callOf(ctx).code = codeOf(err)
		return res, err
	}
}

// WrapStreamingClient leaves client streams alone: the server makes none.
func (outcome) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

// WrapStreamingHandler records the code of a stream (Watch).
func (outcome) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		if ended, ok := endedBy(ctx); ok && err != nil {
			err = ended
		}
		callOf(ctx).code = codeOf(err)
		return err
	}
}

// recorder keeps what the guard needs to name the code of a call that failed
// before any handler saw it: the HTTP status, and the start of an error body.
type recorder struct {
	http.ResponseWriter
	status int
	body   []byte
}

// maxErrorBody is how much of a Connect error body recorder keeps.
const maxErrorBody = 1024

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.status != http.StatusOK && len(r.body) < maxErrorBody {
		r.body = append(r.body, p[:min(len(p), maxErrorBody-len(r.body))]...)
	}
	return r.ResponseWriter.Write(p)
}

// Flush lets streams through: connect needs an http.Flusher.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// code reads the code of the response: the grpc-status of gRPC (a trailer)
// and gRPC-Web (a header of a trailers-only response), or the code of a
// Connect error body.
func (r *recorder) code() string {
	h := r.Header()
	for _, k := range []string{"Grpc-Status", http.TrailerPrefix + "Grpc-Status"} {
		if v := h.Get(k); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return connect.CodeUnknown.String()
			}
			if n == 0 {
				return codeOkay
			}
			return connect.Code(n).String()
		}
	}
	if r.status == http.StatusOK || r.status == 0 {
		return codeOkay
	}
	var body struct {
		Code string `json:"code"`
	}
	if json.Unmarshal(r.body, &body) == nil && body.Code != "" {
		return body.Code
	}
	return "http_" + strconv.Itoa(r.status)
}
