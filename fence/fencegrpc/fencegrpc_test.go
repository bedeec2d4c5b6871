package fencegrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/fence/fencegrpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Checker that remembers the tokens the handler saw.
type recorder struct {
	fence.Guard
	mu   sync.Mutex
	seen []fence.Token
}

// TestGRPC calls a real gRPC server on a loopback listener through both
// interceptors; the health service stands in for any unary service.
func TestGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var rec recorder
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
		fencegrpc.UnaryServerInterceptor(&rec.Guard),
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if tok, ok := fence.FromContext(ctx); ok {
				rec.mu.Lock()
				rec.seen = append(rec.seen, tok)
				rec.mu.Unlock()
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		<-served
	}()

	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(fencegrpc.UnaryClientInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	call := func(ctx context.Context) codes.Code {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		return status.Code(err)
	}
	with := func(f uint64) context.Context {
		return fence.NewContext(context.Background(), fence.Token{Key: "ledger/7", Fence: f})
	}

	if c := call(with(10)); c != codes.OK {
		t.Fatalf("fence 10: %v", c)
	}
	if c := call(with(9)); c != codes.FailedPrecondition {
		t.Fatalf("stale fence 9: %v, want FailedPrecondition", c)
	}
	if c := call(with(11)); c != codes.OK {
		t.Fatalf("fence 11: %v", c)
	}
	if c := call(context.Background()); c != codes.OK {
		t.Fatalf("no fence: %v, want it passed unchecked", c)
	}
	bad := metadata.AppendToOutgoingContext(context.Background(), fencegrpc.MetadataKey, "ledger/7", fencegrpc.MetadataFence, "zero")
	if c := call(bad); c != codes.InvalidArgument {
		t.Fatalf("malformed fence: %v, want InvalidArgument", c)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	want := []fence.Token{{Key: "ledger/7", Fence: 10}, {Key: "ledger/7", Fence: 11}}
	if len(rec.seen) != len(want) || rec.seen[0] != want[0] || rec.seen[1] != want[1] {
		t.Fatalf("the handler saw %+v, want %+v: rejected calls must not reach it", rec.seen, want)
	}
	if rec.Last("ledger/7") != 11 {
		t.Fatalf("guard at %d, want 11", rec.Last("ledger/7"))
	}
}
