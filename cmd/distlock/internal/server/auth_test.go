package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// rpc is one call of each RPC, with a request that would be valid.
type rpc struct {
	name string
	call func(ctx context.Context, api distlockv1connect.LockServiceClient) error
}

func everyRPC(key string) []rpc {
	const session = "0123456789abcdef0123456789abcdef"
	return []rpc{
		{"Acquire", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: key}))
			return err
		}},
		{"Renew", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.Renew(ctx, connect.NewRequest(&distlockv1.RenewRequest{Key: key, Token: "0123456789abcdef0123456789abcdef"}))
			return err
		}},
		{"Release", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.Release(ctx, connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: "0123456789abcdef0123456789abcdef"}))
			return err
		}},
		{"Inspect", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.Inspect(ctx, connect.NewRequest(&distlockv1.InspectRequest{Key: key}))
			return err
		}},
		{"List", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.List(ctx, connect.NewRequest(&distlockv1.ListRequest{Prefix: key}))
			return err
		}},
		{"Watch", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			stream, err := api.Watch(ctx, connect.NewRequest(&distlockv1.WatchRequest{Prefix: key}))
			if err != nil {
				return err
			}
			defer stream.Close()
			for stream.Receive() {
			}
			if connect.CodeOf(stream.Err()) == connect.CodeDeadlineExceeded {
				return nil // it was watching
			}
			return stream.Err()
		}},
		{"ForceRelease", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.ForceRelease(ctx, connect.NewRequest(&distlockv1.ForceReleaseRequest{Key: key, Reason: "test"}))
			return err
		}},
		{"OpenSession", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.OpenSession(ctx, connect.NewRequest(&distlockv1.OpenSessionRequest{}))
			return err
		}},
		{"KeepAlive", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.KeepAlive(ctx, connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: session}))
			return err
		}},
		{"CloseSession", func(ctx context.Context, api distlockv1connect.LockServiceClient) error {
			_, err := api.CloseSession(ctx, connect.NewRequest(&distlockv1.CloseSessionRequest{SessionId: session}))
			return err
		}},
	}
}

// No token, a wrong token and a malformed header are Unauthenticated on
// every RPC, and a role's missing rights PermissionDenied, before the
// request is even read; nothing changes in the store.
func TestAuthMatrix(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		key := keyFor(t, "k")
		for _, r := range everyRPC(key) {
			t.Run(r.name, func(t *testing.T) {
				wantCode(t, "no token", r.call(ctx(t), e.api("")), connect.CodeUnauthenticated)
				wantCode(t, "wrong token", r.call(ctx(t), e.api("wrong-token-0000000000")), connect.CodeUnauthenticated)
				wantCode(t, "a token's prefix", r.call(ctx(t), e.api(alphaClient[:len(alphaClient)-1])), connect.CodeUnauthenticated)
				basic := connect.WithInterceptors(header("Authorization", "Basic "+alphaClient))
				wantCode(t, "basic auth", r.call(ctx(t), e.api("", basic)), connect.CodeUnauthenticated)
				wantCode(t, "no token over gRPC", r.call(ctx(t), e.api("", connect.WithGRPC())), connect.CodeUnauthenticated)
			})
		}
		if l := inspect(t, e.api(opsAdmin), key); l.GetHeld() {
			t.Errorf("after refused calls, %q is held", key)
		}

		denied := map[string]string{ // role token → RPCs it may not call
			alphaViewer: "Acquire Renew Release ForceRelease OpenSession KeepAlive CloseSession",
			alphaClient: "ForceRelease",
		}
		for token, names := range denied {
			for _, r := range everyRPC(key) {
				if strings.Contains(" "+names+" ", " "+r.name+" ") {
					wantCode(t, token[:12]+" "+r.name, r.call(ctx(t), e.api(token)), connect.CodePermissionDenied)
				} else if err := r.call(ctx(t), e.api(token)); connect.CodeOf(err) == connect.CodePermissionDenied ||
					connect.CodeOf(err) == connect.CodeUnauthenticated {
					t.Errorf("%s %s: %v, want it allowed", token[:12], r.name, err)
				}
			}
		}
		_, err := e.api(alphaClient).List(ctx(t), connect.NewRequest(&distlockv1.ListRequest{AllTenants: true}))
		wantCode(t, "a client's List of all tenants", err, connect.CodePermissionDenied)

		// Unauthenticated comes first, even for a body that is no request.
		req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, e.url+distlockv1connect.LockServiceAcquireProcedure, strings.NewReader("{not json"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := e.h1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("malformed body without a token: HTTP %d, want 401", res.StatusCode)
		}
	})
}

// A tenant cannot reach another's key: the same name is another lock, and
// another tenant's token does nothing to it.
func TestTenantIsolation(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		alpha, beta := e.api(alphaClient), e.api(betaClient)
		key := keyFor(t, "shared")
		a := acquire(t, alpha, &distlockv1.AcquireRequest{Key: key, Owner: "alpha"})

		if l := inspect(t, beta, key); l.GetHeld() || l.GetOwner() != "" || l.GetFence() != 0 {
			t.Errorf("beta's Inspect of %q = %v, want not held", key, l)
		}
		if keys := list(t, beta, keyFor(t, "")); len(keys) != 0 {
			t.Errorf("beta lists %v under alpha's prefix", keys)
		}
		b := acquire(t, beta, &distlockv1.AcquireRequest{Key: key, Owner: "beta"})
		if l := inspect(t, beta, key); !l.GetHeld() || l.GetOwner() != "beta" || l.GetFence() != b.GetFence() {
			t.Errorf("beta's %q = %v, want beta's hold", key, l)
		}
		// An admin reaches a tenant's key only by naming the tenant.
		res, err := e.api(opsAdmin).ForceRelease(ctx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{Key: key, Reason: "test"}))
		if err != nil || res.Msg.GetLock().GetHeld() {
			t.Errorf("ops's ForceRelease of its own %q = %v, %v; want not held", key, res, err)
		}
		// A token is good for its own tenant's key only.
		_, err = beta.Renew(ctx(t), connect.NewRequest(&distlockv1.RenewRequest{Key: key, Token: a.GetToken(), Lease: durationpb.New(time.Minute)}))
		wantCode(t, "beta's Renew with alpha's token", err, connect.CodeNotFound)
		_, err = beta.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: a.GetToken()}))
		wantCode(t, "beta's Release with alpha's token", err, connect.CodeNotFound)
		if l := inspect(t, alpha, key); !l.GetHeld() || l.GetOwner() != "alpha" || l.GetFence() != a.GetFence() {
			t.Errorf("alpha's %q after the others' calls = %v, want alpha's hold unchanged", key, l)
		}
		if l := inspect(t, beta, key); !l.GetHeld() || l.GetFence() != b.GetFence() {
			t.Errorf("beta's %q after its calls with alpha's token = %v, want beta's hold unchanged", key, l)
		}
	})
}

// header is a client interceptor that sets one request header.
func header(name, value string) connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			req.Header().Set(name, value)
			return next(ctx, req)
		}
	})
}
