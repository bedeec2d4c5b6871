package server_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// grpcConn dials e's server with grpc-go over h2c, as grpcurl and a
// Kubernetes gRPC probe do, with no token.
func grpcConn(t *testing.T, e *env) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(strings.TrimPrefix(e.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// TestReflection: a gRPC client without the schema lists the services and
// fetches the LockService's descriptor through server reflection, with no
// token, as grpcurl list and buf curl do.
func TestReflection(t *testing.T) {
	e := newEnv(t, stores(t)[0], server.Limits{})
	stream, err := reflectpb.NewServerReflectionClient(grpcConn(t, e)).ServerReflectionInfo(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(req *reflectpb.ServerReflectionRequest) *reflectpb.ServerReflectionResponse {
		t.Helper()
		if err := stream.Send(req); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	list := ask(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}})
	var names []string
	for _, s := range list.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{distlockv1connect.LockServiceName, healthpb.Health_ServiceDesc.ServiceName} {
		if !slices.Contains(names, want) {
			t.Errorf("reflection lists %v, without %s", names, want)
		}
	}
	file := ask(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: distlockv1connect.LockServiceName}})
	if fds := file.GetFileDescriptorResponse().GetFileDescriptorProto(); len(fds) == 0 {
		t.Errorf("no descriptor for %s: %v", distlockv1connect.LockServiceName, file.GetErrorResponse())
	}
	missing := ask(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "no.such.Service"}})
	if missing.GetErrorResponse().GetErrorCode() != int32(codes.NotFound) {
		t.Errorf("an unknown symbol: %v, want NotFound", missing)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}

// TestReflectionStreamEnds: a reflection stream a client leaves open is
// ended by the server, so an unauthenticated caller cannot hold streams.
func TestReflectionStreamEnds(t *testing.T) {
	e := newEnvConfig(t, server.Config{Client: stores(t)[0].open(t), Limits: server.Limits{MaxStreamLifetime: time.Second}})
	stream, err := reflectpb.NewServerReflectionClient(grpcConn(t, e)).ServerReflectionInfo(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = stream.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("an idle reflection stream ended with %v, want Unavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("an idle reflection stream ended after %v, want about 1s", d)
	}
}

// TestHealth: the standard gRPC health service answers without a token:
// SERVING for the whole server and for the LockService while the store
// answers, NOT_SERVING once the probe fails or Shutdown began, NotFound for
// a service it does not have.
func TestHealth(t *testing.T) {
	st := stores(t)[0]
	check := func(t *testing.T, e *env, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
		t.Helper()
		resp, err := healthpb.NewHealthClient(grpcConn(t, e)).Check(ctx(t), &healthpb.HealthCheckRequest{Service: service})
		return resp.GetStatus(), err
	}
	e := newEnv(t, st, server.Limits{})
	for _, service := range []string{"", distlockv1connect.LockServiceName} {
		if got, err := check(t, e, service); err != nil || got != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("Check(%q) = %v, %v; want SERVING", service, got, err)
		}
	}
	if _, err := check(t, e, "no.such.Service"); status.Code(err) != codes.NotFound {
		t.Errorf("Check of an unknown service: %v, want NotFound", err)
	}
	down := newEnvConfig(t, server.Config{Client: st.open(t), Ready: func(context.Context) error { return errors.New("store unreachable") }})
	if got, err := check(t, down, ""); err != nil || got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check with a store that does not answer = %v, %v; want NOT_SERVING", got, err)
	}
	e.srv.Shutdown()
	if got, err := check(t, e, distlockv1connect.LockServiceName); err != nil || got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Check after Shutdown = %v, %v; want NOT_SERVING", got, err)
	}
}
