package server_test

import (
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
	"github.com/distlock/distlock/internal/testserver"
)

// routed is a server over three stores: tenant beta's keys in an etcd of
// their own, alpha's keys under "routed/" in a Redis, every other key in
// the default etcd. Each client is also the test's, to look behind the
// server's back.
type routed struct {
	*env
	home, beta, redis *distlock.Client
}

func newRouted(t *testing.T) routed {
	home, _ := etcdStore(t)
	beta, _ := etcdStore(t)
	r := routed{home: home.open(t), beta: beta.open(t), redis: redisStore(t, testserver.Redis(t).Addr()).open(t)}
	t.Cleanup(func() { _ = r.beta.Close(); _ = r.redis.Close() })
	r.env = newEnvConfig(t, server.Config{Client: r.home, Routes: []server.Route{
		{Prefix: "tenants/beta/", Client: r.beta},
		{Prefix: "tenants/alpha/routed/", Client: r.redis},
	}})
	return r
}

// held reports whether c holds store key sk.
func held(t *testing.T, c *distlock.Client, sk string) bool {
	t.Helper()
	info, err := c.Inspect(ctx(t), sk)
	if err != nil {
		t.Fatalf("inspect %q in the store: %v", sk, err)
	}
	return info.Held
}

// Each key is granted, renewed, inspected and released in its route's
// store, and in no other.
func TestRoutesPlaceEachKeyInItsStore(t *testing.T) {
	r := newRouted(t)
	alpha, beta := r.api(alphaClient), r.api(betaClient)
	cases := []struct {
		api   distlockv1connect.LockServiceClient
		key   string
		sk    string
		store *distlock.Client
	}{
		{alpha, "plain", "tenants/alpha/plain", r.home},
		{alpha, "routed/x", "tenants/alpha/routed/x", r.redis},
		{beta, "plain", "tenants/beta/plain", r.beta},
	}
	for _, c := range cases {
		api := c.api
		res := acquire(t, api, &distlockv1.AcquireRequest{Key: c.key, Lease: durationpb.New(time.Minute)})
		for _, s := range []*distlock.Client{r.home, r.beta, r.redis} {
			if got, want := held(t, s, c.sk), s == c.store; got != want {
				t.Errorf("%s after its grant: held in a store = %v, want %v (its route's store only)", c.sk, got, want)
			}
		}
		if l := inspect(t, api, c.key); !l.GetHeld() || l.GetFence() != res.GetFence() {
			t.Errorf("Inspect %q = %v, want held at fence %d", c.key, l, res.GetFence())
		}
		if _, err := api.Renew(ctx(t), connect.NewRequest(&distlockv1.RenewRequest{Key: c.key, Token: res.GetToken(), Lease: durationpb.New(time.Minute)})); err != nil {
			t.Errorf("Renew %q: %v", c.key, err)
		}
		if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: c.key, Token: res.GetToken()})); err != nil {
			t.Errorf("Release %q: %v", c.key, err)
		}
		if held(t, c.store, c.sk) {
			t.Errorf("%s still held in its store after its release", c.sk)
		}
	}
}

// List walks the keys of every store in one key order, a page at a time,
// and leaves out a key held in a store its route does not name (the
// service cannot reach it there).
func TestRoutesListAcrossStores(t *testing.T) {
	r := newRouted(t)
	alpha := r.api(alphaClient)
	keys := []string{"a", "routed/b", "c", "routed/d", "e", "routed/f"}
	for _, k := range keys {
		acquire(t, alpha, &distlockv1.AcquireRequest{Key: k, Lease: durationpb.New(time.Minute)})
	}
	stray, err := r.home.AcquireToken(ctx(t), "tenants/alpha/routed/stray", "stray-token-0123456789", distlock.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.home.ReleaseToken(ctx(t), "tenants/alpha/routed/stray", stray.Token) }()

	for _, size := range []int32{1, 2, 4, 100} {
		var got []string
		req := &distlockv1.ListRequest{PageSize: size}
		for range 20 {
			res, err := alpha.List(ctx(t), connect.NewRequest(req))
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range res.Msg.GetLocks() {
				got = append(got, l.GetKey())
			}
			if req.PageToken = res.Msg.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		want := slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Errorf("List in pages of %d = %q, want %q", size, got, want)
		}
	}
	if got := list(t, alpha, "routed/"); !slices.Equal(got, []string{"routed/b", "routed/d", "routed/f"}) {
		t.Errorf("List of routed/ = %q, want its three keys", got)
	}
	// The stray key's route is Redis, where it is free.
	acquire(t, alpha, &distlockv1.AcquireRequest{Key: "routed/stray", Lease: durationpb.New(time.Minute)})
}

// A Watch of a tenant tells of changes in each of its stores; a session's
// locks are kept alive and released in each.
func TestRoutesWatchAndSessions(t *testing.T) {
	r := newRouted(t)
	alpha := r.api(alphaClient)
	events, _ := watch(t, alpha, "")
	sid := openSession(t, alpha)
	for _, k := range []string{"plain", "routed/s"} {
		acquire(t, alpha, &distlockv1.AcquireRequest{Key: k, SessionId: sid})
		if ev := nextEvent(t, events, k); ev.GetType() != distlockv1.Event_TYPE_ACQUIRED {
			t.Errorf("first event about %q = %v, want its grant", k, ev)
		}
	}
	// Behind the server's back, so that only the store's notice tells.
	g, err := r.redis.AcquireToken(ctx(t), "tenants/alpha/routed/direct", "direct-token-0123456789", distlock.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events, "routed/direct"); ev.GetType() != distlockv1.Event_TYPE_ACQUIRED {
		t.Errorf("first event about a grant in the routed store = %v, want it", ev)
	}
	_ = r.redis.ReleaseToken(ctx(t), "tenants/alpha/routed/direct", g.Token)

	res, err := alpha.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: sid}))
	if err != nil || res.Msg.GetLocks() != 2 {
		t.Fatalf("KeepAlive = %v, %v: want both locks renewed", res, err)
	}
	if _, err := alpha.CloseSession(ctx(t), connect.NewRequest(&distlockv1.CloseSessionRequest{SessionId: sid})); err != nil {
		t.Fatal(err)
	}
	if held(t, r.home, "tenants/alpha/plain") || held(t, r.redis, "tenants/alpha/routed/s") {
		t.Error("a lock of a closed session is still held in its store")
	}
}

// Routes the server cannot serve are refused.
func TestRoutesRefused(t *testing.T) {
	st, _ := etcdStore(t)
	c := st.open(t)
	defer c.Close()
	for name, routes := range map[string][]server.Route{
		"no prefix":  {{Prefix: "", Client: c}},
		"nil client": {{Prefix: "tenants/a/"}},
		"twice":      {{Prefix: "tenants/a/", Client: c}, {Prefix: "tenants/a/", Client: c}},
	} {
		if _, err := server.New(server.Config{Client: c, InsecureNoAuth: true, Routes: routes}); err == nil {
			t.Errorf("%s: New accepted the routes", name)
		}
	}
}
