package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// healthChecker answers grpc.health.v1's Check as /readyz does: SERVING
// while the store answers the probe and Shutdown has not begun, for the
// whole server ("") and for the LockService. Watch is not offered
// (Unimplemented): Kubernetes and load balancers probe with Check.
type healthChecker struct{ s *Server }

func (h healthChecker) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && req.Service != distlockv1connect.LockServiceName {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("no service %q here: ask for %q or the whole server (\"\")", req.Service, distlockv1connect.LockServiceName))
	}
	if h.s.readiness(ctx) != nil {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
}

// openHandlers returns the handlers anyone may call without a token, by
// path: gRPC server reflection (v1 and v1alpha), so that grpcurl and buf
// curl need no schema, and the gRPC health service. They reveal nothing a
// caller could not read in the published protos and /readyz.
func (s *Server) openHandlers(opts ...connect.HandlerOption) map[string]http.Handler {
	reflector := grpcreflect.NewStaticReflector(distlockv1connect.LockServiceName, grpchealth.HealthV1ServiceName)
	streams := append(opts, connect.WithInterceptors(streamEnd{}))
	v1, reflectV1 := grpcreflect.NewHandlerV1(reflector, streams...)
	v1alpha, reflectV1Alpha := grpcreflect.NewHandlerV1Alpha(reflector, streams...)
	health, checks := grpchealth.NewHandler(healthChecker{s}, opts...)
	return map[string]http.Handler{
		v1:      s.bounded(reflectV1),
		v1alpha: s.bounded(reflectV1Alpha),
		health:  checks, // Check only: it answers NOT_SERVING after Shutdown
	}
}

// bounded ends each call of next, a reflection stream, after the stream
// lifetime or at Shutdown: it needs no token, and none may be held open for
// good. A handler waiting for the caller's next message reads the body,
// which no context ends: closing the body does, and streamEnd then answers
// the call.
func (s *Server) bounded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.limits.MaxStreamLifetime)
		defer cancel()
		defer context.AfterFunc(s.stopCtx, cancel)()
		ended := new(atomic.Bool)
		defer context.AfterFunc(ctx, func() {
			ended.Store(true) // before the close that the handler sees
			_ = r.Body.Close()
		})()
		next.ServeHTTP(w, r.WithContext(context.WithValue(ctx, streamEndedKey{}, ended)))
	})
}

// streamEndedKey keys the flag bounded sets when it ends a stream.
type streamEndedKey struct{}

// streamEnd answers a stream that bounded ended with Unavailable, as a
// Watch at the end of its lifetime is answered: open it again. Without it
// the caller would get whatever the handler made of its closed body.
type streamEnd struct{}

func (streamEnd) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc { return next }

func (streamEnd) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (streamEnd) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		if ended, _ := ctx.Value(streamEndedKey{}).(*atomic.Bool); ended != nil && ended.Load() {
			return connect.NewError(connect.CodeUnavailable, errors.New("the stream's lifetime ended, or the server is shutting down: open it again"))
		}
		return err
	}
}
