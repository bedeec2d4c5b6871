package server

import (
	"context"
	"fmt"
	"net/http"

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
	v1, reflectV1 := grpcreflect.NewHandlerV1(reflector, opts...)
	v1alpha, reflectV1Alpha := grpcreflect.NewHandlerV1Alpha(reflector, opts...)
	health, checks := grpchealth.NewHandler(healthChecker{s}, opts...)
	return map[string]http.Handler{
		v1:      s.bounded(reflectV1),
		v1alpha: s.bounded(reflectV1Alpha),
		health:  checks, // Check only: it answers NOT_SERVING after Shutdown
	}
}

// bounded ends each call of next, a reflection stream, after the stream
// lifetime or at Shutdown: it needs no token, and none may be held open for
// good.
// A handler waiting for the caller's next message reads the body, which no
// context ends: closing the body does.
func (s *Server) bounded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.limits.MaxStreamLifetime)
		defer cancel()
		defer context.AfterFunc(s.stopCtx, cancel)()
		defer context.AfterFunc(ctx, func() { _ = r.Body.Close() })()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}
