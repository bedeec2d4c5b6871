package server_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// sessionTTL is long enough for etcd, whose leases count whole seconds with
// a floor of 2s.
const sessionTTL = 2 * time.Second

func openSession(t *testing.T, api distlockv1connect.LockServiceClient) string {
	t.Helper()
	res, err := api.OpenSession(ctx(t), connect.NewRequest(&distlockv1.OpenSessionRequest{Ttl: durationpb.New(sessionTTL)}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Msg.GetTtl().AsDuration() != sessionTTL || len(res.Msg.GetSessionId()) != 32 {
		t.Fatalf("OpenSession = %v, want a 32-character id and the TTL %v", res.Msg, sessionTTL)
	}
	return res.Msg.GetSessionId()
}

// Two locks of a session live past their TTL while KeepAlive renews them,
// and both end one TTL after the KeepAlives stop.
func TestSessionKeepAlive(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		sid := openSession(t, api)
		k1, k2 := keyFor(t, "one"), keyFor(t, "two")
		for _, k := range []string{k1, k2} {
			res := acquire(t, api, &distlockv1.AcquireRequest{Key: k, SessionId: sid, Lease: durationpb.New(time.Hour)})
			if res.GetLease().AsDuration() != sessionTTL {
				t.Errorf("a session's lock got the lease %v, want the session's TTL %v", res.GetLease().AsDuration(), sessionTTL)
			}
		}
		loner := acquire(t, api, &distlockv1.AcquireRequest{Key: keyFor(t, "loner"), Lease: durationpb.New(time.Minute)})

		until := time.Now().Add(2*sessionTTL + sessionTTL/2)
		for time.Now().Before(until) {
			res, err := api.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: sid}))
			if err != nil {
				t.Fatalf("KeepAlive: %v", err)
			}
			if res.Msg.GetLocks() != 2 || res.Msg.GetTtl().AsDuration() != sessionTTL {
				t.Fatalf("KeepAlive = %v, want 2 locks renewed by %v", res.Msg, sessionTTL)
			}
			time.Sleep(sessionTTL / 4)
		}
		for _, k := range []string{k1, k2} {
			if l := inspect(t, api, k); !l.GetHeld() || l.GetLabels()["distlock.session"] == "" {
				t.Errorf("%q after %v of KeepAlives = %v, want held by the session", k, 2*sessionTTL, l)
			}
		}
		eventually(t, sessionTTL+5*time.Second, "the session's locks end", func() bool {
			return !inspect(t, api, k1).GetHeld() && !inspect(t, api, k2).GetHeld()
		})
		_, err := api.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: sid}))
		wantCode(t, "KeepAlive of an ended session", err, connect.CodeNotFound)
		_, err = api.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: k1, SessionId: sid}))
		wantCode(t, "Acquire in an ended session", err, connect.CodeNotFound)
		if l := inspect(t, api, keyFor(t, "loner")); !l.GetHeld() || l.GetFence() != loner.GetFence() {
			t.Errorf("a lock outside the session = %v, want still held", l)
		}
	})
}

// CloseSession releases every lock of its session, and only those.
func TestSessionClose(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		sid, other := openSession(t, api), openSession(t, api)
		k1, k2, k3 := keyFor(t, "one"), keyFor(t, "two"), keyFor(t, "other")
		acquire(t, api, &distlockv1.AcquireRequest{Key: k1, SessionId: sid})
		acquire(t, api, &distlockv1.AcquireRequest{Key: k2, SessionId: sid})
		acquire(t, api, &distlockv1.AcquireRequest{Key: k3, SessionId: other})

		// Another tenant cannot use the session.
		_, err := e.api(betaClient).CloseSession(ctx(t), connect.NewRequest(&distlockv1.CloseSessionRequest{SessionId: sid}))
		wantCode(t, "beta's CloseSession of alpha's session", err, connect.CodeNotFound)

		res, err := api.CloseSession(ctx(t), connect.NewRequest(&distlockv1.CloseSessionRequest{SessionId: sid}))
		if err != nil || res.Msg.GetLocks() != 2 {
			t.Fatalf("CloseSession = %v, %v; want 2 locks released", res, err)
		}
		if inspect(t, api, k1).GetHeld() || inspect(t, api, k2).GetHeld() {
			t.Error("a closed session's lock is still held")
		}
		if !inspect(t, api, k3).GetHeld() {
			t.Error("closing one session released another's lock")
		}
		_, err = api.CloseSession(ctx(t), connect.NewRequest(&distlockv1.CloseSessionRequest{SessionId: sid}))
		wantCode(t, "second CloseSession", err, connect.CodeNotFound)
		_, err = api.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: sid}))
		wantCode(t, "KeepAlive after CloseSession", err, connect.CodeNotFound)
		_, err = api.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: k1, SessionId: "0123456789abcdef0123456789abcdef"}))
		wantCode(t, "Acquire in a session that never was", err, connect.CodeNotFound)
		_, err = api.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: "not-a-session"}))
		wantCode(t, "KeepAlive of a malformed id", err, connect.CodeInvalidArgument)
	})
}

// A retried Acquire with the same request id gets the same token and fence,
// alone or in a session; another request id is refused while it holds.
func TestIdempotentAcquire(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		const rid = "3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"
		for _, sid := range []string{"", openSession(t, api)} {
			key := keyFor(t, "k"+sid)
			req := &distlockv1.AcquireRequest{Key: key, RequestId: rid, SessionId: sid, Lease: durationpb.New(time.Minute)}
			first := acquire(t, api, req)
			retry := acquire(t, api, req)
			if retry.GetToken() != first.GetToken() || retry.GetFence() != first.GetFence() {
				t.Errorf("session %q: retry = %v, want the first grant's token and fence %v", sid, retry, first)
			}
			req.Wait = durationpb.New(300 * time.Millisecond)
			if waited := acquire(t, api, req); waited.GetToken() != first.GetToken() || waited.GetFence() != first.GetFence() {
				t.Errorf("session %q: retry with a wait = %v, want the first grant's", sid, waited)
			}
			_, err := api.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: key, RequestId: rid + "-other", SessionId: sid}))
			wantCode(t, "another request id", err, connect.CodeAborted)
			beta := acquire(t, e.api(betaClient), &distlockv1.AcquireRequest{Key: key, RequestId: rid})
			if beta.GetToken() == first.GetToken() {
				t.Error("another tenant's Acquire with the same request id got the same token")
			}
			if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: first.GetToken()})); err != nil {
				t.Fatal(err)
			}
			again := acquire(t, api, &distlockv1.AcquireRequest{Key: key, RequestId: rid, SessionId: sid})
			if again.GetFence() <= first.GetFence() {
				t.Errorf("session %q: a new grant after the release has fence %d, want over %d", sid, again.GetFence(), first.GetFence())
			}
		}
	})
}

// lockReads is a store that counts the locks it describes: one per lock a
// List or ListPage returns, one per Inspect.
type lockReads struct {
	*memlock.Backend
	n atomic.Int64
}

func (r *lockReads) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	infos, err := r.Backend.List(ctx, prefix)
	r.n.Add(int64(len(infos)))
	return infos, err
}

func (r *lockReads) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	infos, err := r.Backend.ListPage(ctx, prefix, after, limit)
	r.n.Add(int64(len(infos)))
	return infos, err
}

func (r *lockReads) Inspect(ctx context.Context, key string) (driver.Info, error) {
	r.n.Add(1)
	return r.Backend.Inspect(ctx, key)
}

// A session's KeepAlive and CloseSession read its own locks from the store,
// not every lock of its tenant: with thousands of sessions and locks, each
// KeepAlive reading the namespace would cost the store the square of them.
func TestSessionReadsItsOwnLocks(t *testing.T) {
	store := &lockReads{Backend: memlock.New()}
	e := newEnvClient(t, distlock.New(store), server.Limits{})
	api := e.api(alphaClient)
	sid, other := openSession(t, api), openSession(t, api)
	for i := range 100 {
		acquire(t, api, &distlockv1.AcquireRequest{Key: fmt.Sprintf("loose/%03d", i), Lease: durationpb.New(time.Minute)})
	}
	for i := range 20 {
		acquire(t, api, &distlockv1.AcquireRequest{Key: fmt.Sprintf("other/%03d", i), SessionId: other})
	}
	for _, k := range []string{"mine/1", "mine/2"} {
		acquire(t, api, &distlockv1.AcquireRequest{Key: k, SessionId: sid})
	}
	// A KeepAlive reads the session's two members; the session itself
	// is known to the server that opened it. CloseSession also reads the
	// session.
	const keepAliveMost, closeMost = 2, 3
	store.n.Store(0)
	res, err := api.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: sid}))
	if err != nil || res.Msg.GetLocks() != 2 {
		t.Fatalf("KeepAlive = %v, %v; want 2 locks renewed", res, err)
	}
	if n := store.n.Swap(0); n > keepAliveMost {
		t.Errorf("KeepAlive of a session of 2 locks read %d locks from the store, want at most %d", n, keepAliveMost)
	}
	closed, err := api.CloseSession(ctx(t), connect.NewRequest(&distlockv1.CloseSessionRequest{SessionId: sid}))
	if err != nil || closed.Msg.GetLocks() != 2 {
		t.Fatalf("CloseSession = %v, %v; want 2 locks released", closed, err)
	}
	if n := store.n.Swap(0); n > closeMost {
		t.Errorf("CloseSession of a session of 2 locks read %d locks from the store, want at most %d", n, closeMost)
	}
}

// members returns the store keys of the members of alpha's sessions.
func members(t *testing.T, c *distlock.Client) []string {
	t.Helper()
	infos, err := c.List(ctx(t), "sessions/alpha/")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, i := range infos {
		if strings.Count(i.Key, "/") == 3 {
			out = append(out, i.Key)
		}
	}
	return out
}

// A lock of a session has a member from its grant until the KeepAlive after
// its end; a refused Acquire leaves none. A session an earlier release
// opened, without members, still has its locks kept alive.
func TestSessionMembers(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		sid := openSession(t, api)
		mine, taken := keyFor(t, "mine"), keyFor(t, "taken")
		lock := acquire(t, api, &distlockv1.AcquireRequest{Key: mine, SessionId: sid})
		acquire(t, api, &distlockv1.AcquireRequest{Key: taken, Lease: durationpb.New(time.Minute)})
		_, err := api.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: taken, SessionId: sid}))
		wantCode(t, "a session's Acquire of a held key", err, connect.CodeAborted)
		if m := members(t, e.client); len(m) != 1 {
			t.Fatalf("members after one grant and one refusal: %q, want one", m)
		}
		if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: mine, Token: lock.GetToken()})); err != nil {
			t.Fatal(err)
		}
		res, err := api.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: sid}))
		if err != nil || res.Msg.GetLocks() != 0 {
			t.Fatalf("KeepAlive after the release = %v, %v; want 0 locks", res, err)
		}
		if m := members(t, e.client); len(m) != 0 {
			t.Fatalf("members after the lock's release and a KeepAlive: %q, want none", m)
		}

		// A session as an earlier release opened it: no labelMembers.
		const secret = "0123456789abcdef0123456789abcdef"
		if _, err := e.client.AcquireToken(ctx(t), "sessions/alpha/"+server.SessionHandle(secret), secret,
			distlock.WithLease(sessionTTL), distlock.WithMetadata(map[string]string{"distlock.ttl": sessionTTL.String()})); err != nil {
			t.Fatal(err)
		}
		older := keyFor(t, "older")
		acquire(t, api, &distlockv1.AcquireRequest{Key: older, SessionId: secret})
		for range 3 {
			time.Sleep(sessionTTL / 2)
			res, err := api.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: secret}))
			if err != nil || res.Msg.GetLocks() != 1 {
				t.Fatalf("KeepAlive of an earlier release's session = %v, %v; want its lock renewed", res, err)
			}
		}
		if !inspect(t, api, older).GetHeld() {
			t.Fatal("the lock of an earlier release's session ended while KeepAlive renewed it")
		}
	})
}

// A session opened through one server is kept alive through another over
// the same store, and once closed through the first, the second says so,
// though it had known the session.
func TestSessionAcrossServers(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		client := st.open(t)
		one, two := newEnvClient(t, client, server.Limits{}), newEnvClient(t, client, server.Limits{})
		a, b := one.api(alphaClient), two.api(alphaClient)
		sid := openSession(t, a)
		acquire(t, a, &distlockv1.AcquireRequest{Key: keyFor(t, "k"), SessionId: sid})
		res, err := b.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: sid}))
		if err != nil || res.Msg.GetLocks() != 1 {
			t.Fatalf("KeepAlive through the other server = %v, %v; want 1 lock", res, err)
		}
		if _, err := a.CloseSession(ctx(t), connect.NewRequest(&distlockv1.CloseSessionRequest{SessionId: sid})); err != nil {
			t.Fatal(err)
		}
		_, err = b.KeepAlive(ctx(t), connect.NewRequest(&distlockv1.KeepAliveRequest{SessionId: sid}))
		wantCode(t, "KeepAlive through the other server of a closed session", err, connect.CodeNotFound)
	})
}

// inspects is a store that counts its Inspects of one key.
type inspects struct {
	*memlock.Backend
	key string
	n   atomic.Int64
}

func (i *inspects) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if key == i.key {
		i.n.Add(1)
	}
	return i.Backend.Inspect(ctx, key)
}

// A first try with a request id (first_try) that finds the key held waits
// without asking the store who holds it, before or after its wait: behind
// a long queue that read costs the store the queue's length. A retry
// still asks, and gets its own grant back.
func TestFirstTryReadsNoHolder(t *testing.T) {
	store := &inspects{Backend: memlock.New(), key: "tenants/alpha/busy"}
	e := newEnvClient(t, distlock.New(store), server.Limits{})
	api := e.api(alphaClient)
	acquire(t, api, &distlockv1.AcquireRequest{Key: "busy", Lease: durationpb.New(time.Minute)})
	store.n.Store(0)
	_, err := api.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: "busy", RequestId: "0123456789abcdef-first",
		Wait: durationpb.New(200 * time.Millisecond), FirstTry: true}))
	wantCode(t, "a first try of a held key", err, connect.CodeAborted)
	if n := store.n.Load(); n != 0 {
		t.Errorf("a first try that waited read the key's holder %d times, want 0", n)
	}
	mine := acquire(t, api, &distlockv1.AcquireRequest{Key: "free", RequestId: "0123456789abcdef-retry", FirstTry: true})
	retry := acquire(t, api, &distlockv1.AcquireRequest{Key: "free", RequestId: "0123456789abcdef-retry", Wait: durationpb.New(time.Second)})
	if retry.GetToken() != mine.GetToken() || retry.GetFence() != mine.GetFence() {
		t.Errorf("a retry without first_try = %v, want its own grant %v", retry, mine)
	}
}
