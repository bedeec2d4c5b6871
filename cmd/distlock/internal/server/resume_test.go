package server_test

import (
	"context"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/observe"
)

// TestWaiterKeepsItsPlaceAcrossCalls: a wait longer than one Acquire call
// (remotelock's max wait) is made of several calls, and keeps its place in
// the key's queue from one to the next. B queues first with calls of
// 500 ms, C queues after it with one long call; when the holder releases,
// after B's first call ended and its second began, B gets the key first.
func TestWaiterKeepsItsPlaceAcrossCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	svc := startRemoteService(t, remoteStores(t)[0])
	holder := distlock.New(remoteBackendAt(t, svc.addr, remoteClient))
	b := distlock.New(remoteBackendAt(t, svc.addr, remoteClient, remotelock.WithMaxWait(500*time.Millisecond)))
	c := distlock.New(remoteBackendAt(t, svc.addr, remoteClient))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "resume/fifo"
	l, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	wait := func(name string, cl *distlock.Client) {
		wg.Go(func() {
			got, err := cl.Lock(ctx, key, distlock.WithWait(20*time.Second))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			if err := got.Release(ctx); err != nil {
				t.Errorf("%s: release: %v", name, err)
			}
		})
	}
	wait("B", b)
	time.Sleep(250 * time.Millisecond)
	wait("C", c)
	time.Sleep(1100 * time.Millisecond) // B's first two calls have ended
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != 2 || order[0] != "B" {
		t.Fatalf("granted in the order %v, want B (queued first) then C", order)
	}
}

// parkedCall is an Acquire of key under request id id, with a wait and
// resumes as given.
func parkedCall(key, id string, wait time.Duration, firstTry, resumes bool) *connect.Request[distlockv1.AcquireRequest] {
	m := &distlockv1.AcquireRequest{Key: key, RequestId: id, FirstTry: firstTry, Resumes: resumes}
	if wait > 0 {
		m.Wait = durationpb.New(wait)
	}
	return connect.NewRequest(m)
}

// TestParkedWait: what becomes of the place a resumable call leaves in the
// queue (resumes), on each store. The next call takes up the grant made
// meanwhile; a place nobody takes up ends parkTime (2 s) later, with the
// grant it got released rather than held for a whole lease; a call that
// does not resume ends it at once; a kept place counts against the
// tenant's waiters.
func TestParkedWait(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{RatePerTenant: math.Inf(1), MaxWaitersPerTenant: 2})
		api := e.api(alphaClient)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hold := func(t *testing.T, key string) string {
			t.Helper()
			res, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: key}))
			if err != nil {
				t.Fatal(err)
			}
			return res.Msg.GetToken()
		}
		release := func(t *testing.T, key, token string) {
			t.Helper()
			if _, err := api.Release(ctx, connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: token})); err != nil {
				t.Fatal(err)
			}
		}
		aborted := func(t *testing.T, what string, err error) {
			t.Helper()
			if connect.CodeOf(err) != connect.CodeAborted {
				t.Fatalf("%s: %v, want Aborted", what, err)
			}
		}

		t.Run("TakenUp", func(t *testing.T) {
			first := hold(t, "taken")
			_, err := api.Acquire(ctx, parkedCall("taken", "request-id-000001", 200*time.Millisecond, true, true))
			aborted(t, "first call", err)
			// Another waiter queues behind the kept place.
			later := make(chan string, 1)
			go func() {
				res, err := e.api(alphaOther).Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: "taken", Wait: durationpb.New(20 * time.Second)}))
				if err != nil {
					t.Errorf("the later waiter: %v", err)
					later <- ""
					return
				}
				later <- res.Msg.GetToken()
			}()
			time.Sleep(300 * time.Millisecond)
			release(t, "taken", first) // granted to the kept place, between calls
			res, err := api.Acquire(ctx, parkedCall("taken", "request-id-000001", time.Second, false, true))
			if err != nil {
				t.Fatalf("the resumed call, ahead of the later waiter: %v", err)
			}
			release(t, "taken", res.Msg.GetToken())
			if token := <-later; token != "" {
				release(t, "taken", token)
			}
		})

		t.Run("NobodyComesBack", func(t *testing.T) {
			first := hold(t, "gone")
			_, err := api.Acquire(ctx, parkedCall("gone", "request-id-000002", 200*time.Millisecond, true, true))
			aborted(t, "parked call", err)
			release(t, "gone", first) // the parked wait gets it, and nobody takes it up
			// Within 2 s it is released: a waiter gets it long before the
			// lease (the service's default, 30 s) would end.
			res, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: "gone", Wait: durationpb.New(10 * time.Second)}))
			if err != nil {
				t.Fatalf("a waiter after a place nobody took up: %v", err)
			}
			release(t, "gone", res.Msg.GetToken())
		})

		t.Run("EndedByACallWithoutWait", func(t *testing.T) {
			first := hold(t, "ended")
			_, err := api.Acquire(ctx, parkedCall("ended", "request-id-000003", 200*time.Millisecond, true, true))
			aborted(t, "parked call", err)
			_, err = api.Acquire(ctx, parkedCall("ended", "request-id-000003", 0, false, false))
			aborted(t, "the call that gives up", err)
			release(t, "ended", first)
			// The place is gone: the next waiter gets the key at once, not
			// after a parked grant's 2 s.
			res, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: "ended", Wait: durationpb.New(time.Second)}))
			if err != nil {
				t.Fatalf("a waiter after the place ended: %v", err)
			}
			release(t, "ended", res.Msg.GetToken())
		})

		t.Run("CountsAsAWaiter", func(t *testing.T) {
			first := hold(t, "capped")
			for _, id := range []string{"request-id-000004", "request-id-000005"} {
				_, err := api.Acquire(ctx, parkedCall("capped", id, 100*time.Millisecond, true, true))
				aborted(t, "parked call "+id, err)
			}
			_, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: "capped", Wait: durationpb.New(100 * time.Millisecond)}))
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("a third waiter beside two kept places of a tenant allowed 2: %v, want ResourceExhausted", err)
			}
			for _, id := range []string{"request-id-000004", "request-id-000005"} {
				_, err := api.Acquire(ctx, parkedCall("capped", id, 0, false, false))
				aborted(t, "ending "+id, err)
			}
			release(t, "capped", first)
		})
	})
}

// TestShutdownReleasesAKeptGrant: a server that stops releases a grant made
// to a kept place that no call took yet, at once rather than 2 s later: the
// caller's next call goes to another instance, which knows nothing of it.
func TestShutdownReleasesAKeptGrant(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{RatePerTenant: math.Inf(1)})
		api := e.api(alphaClient)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: "kept"}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = api.Acquire(ctx, parkedCall("kept", "request-id-000006", 200*time.Millisecond, true, true))
		if connect.CodeOf(err) != connect.CodeAborted {
			t.Fatalf("parked call: %v, want Aborted", err)
		}
		if _, err := api.Release(ctx, connect.NewRequest(&distlockv1.ReleaseRequest{Key: "kept", Token: res.Msg.GetToken()})); err != nil {
			t.Fatal(err)
		}
		// The kept place gets the key: wait until the store says so.
		sk := "tenants/alpha/kept"
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			info, err := e.client.Inspect(ctx, sk)
			if err != nil {
				t.Fatal(err)
			}
			if info.Held {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the kept place did not get the released key within 5 s")
			}
		}
		e.srv.Shutdown()
		info, err := e.client.Inspect(ctx, sk)
		if err != nil {
			t.Fatal(err)
		}
		if info.Held {
			t.Fatal("the kept place's grant is still held after Shutdown returned")
		}
	})
}

// TestParkedWaitBoundsItsCalls: one request id may have at most 4 calls
// waiting on its kept place at once; a fifth is refused, so that calls
// under one id (which count once against the tenant's waiters) are
// bounded too.
func TestParkedWaitBoundsItsCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	st := stores(t)[1] // the bound is the service's, whatever the store
	e := newEnv(t, st, server.Limits{RatePerTenant: math.Inf(1)})
	api := e.api(alphaClient)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: "bounded"}))
	if err != nil {
		t.Fatal(err)
	}
	const id = "request-id-000007"
	_, err = api.Acquire(ctx, parkedCall("bounded", id, 100*time.Millisecond, true, true))
	if connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("parking call: %v, want Aborted", err)
	}
	var wg sync.WaitGroup
	codes := make(chan connect.Code, 5)
	for range 5 {
		wg.Go(func() {
			_, err := api.Acquire(ctx, parkedCall("bounded", id, 2*time.Second, false, true))
			codes <- connect.CodeOf(err)
		})
	}
	wg.Wait()
	close(codes)
	count := map[connect.Code]int{}
	for c := range codes {
		count[c]++
	}
	if count[connect.CodeResourceExhausted] != 1 || count[connect.CodeAborted] != 4 {
		t.Fatalf("five calls on one kept place: %v, want 4 Aborted and 1 ResourceExhausted", count)
	}
	_, err = api.Acquire(ctx, parkedCall("bounded", id, 0, false, false))
	if connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("ending the place: %v, want Aborted", err)
	}
	if _, err := api.Release(ctx, connect.NewRequest(&distlockv1.ReleaseRequest{Key: "bounded", Token: res.Msg.GetToken()})); err != nil {
		t.Fatal(err)
	}
}

// attempts counts the store's acquisition attempts on keys ending in
// suffix, from the service's client.
type attempts struct {
	suffix string
	n      atomic.Int64
}

func (a *attempts) AcquireStarted(ctx context.Context, _ observe.Event) context.Context { return ctx }

func (a *attempts) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.StoreCall && e.Op == "acquire" && strings.HasSuffix(e.Key, a.suffix) {
		a.n.Add(1)
	}
}

// TestEndingAKeptPlaceTriesNothing: a call without a wait that ends a kept
// place still queued behind the key's holder (a client giving up its wait)
// answers Aborted without an attempt on the store. Behind a deep queue a
// client that gives up thousands of waits at once would otherwise put as
// many attempts on the key ahead of its holder's release; over etcd they
// go one per transaction.
func TestEndingAKeptPlaceTriesNothing(t *testing.T) {
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) {
			counted := &attempts{suffix: "/given-up"}
			e := newEnvClient(t, st.open(t, distlock.WithObserver(counted)), server.Limits{})
			api := e.api(alphaClient)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			held, err := api.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{Key: "given-up"}))
			if err != nil {
				t.Fatal(err)
			}
			_, err = api.Acquire(ctx, parkedCall("given-up", "request-id-000010", 100*time.Millisecond, true, true))
			wantCode(t, "the parked call", err, connect.CodeAborted)
			before := counted.n.Load()
			_, err = api.Acquire(ctx, parkedCall("given-up", "request-id-000010", 0, false, false))
			wantCode(t, "the call that gives the place up", err, connect.CodeAborted)
			if n := counted.n.Load() - before; n != 0 {
				t.Errorf("ending a place queued behind the holder made %d attempts on the store, want none", n)
			}

			// The same while a call still waits on the place: the client
			// gave up its wait before the service heard its call end. The
			// ended place's wait leaves the store first.
			eventually(t, 5*time.Second, "the ended place's wait gone", func() bool {
				return gauge(t, e, "distlock_server_waiting") == 0
			})
			waiting := make(chan error, 1)
			go func() {
				_, err := api.Acquire(ctx, parkedCall("given-up", "request-id-000011", 2*time.Second, true, true))
				waiting <- err
			}()
			eventually(t, 5*time.Second, "a wait in the store", func() bool {
				return gauge(t, e, "distlock_server_waiting") == 1
			})
			before = counted.n.Load()
			_, err = api.Acquire(ctx, parkedCall("given-up", "request-id-000011", 0, false, false))
			wantCode(t, "the call that gives up a place a call waits on", err, connect.CodeAborted)
			if n := counted.n.Load() - before; n != 0 {
				t.Errorf("ending a place a call waits on made %d attempts on the store, want none", n)
			}
			wantCode(t, "the call that waited", <-waiting, connect.CodeAborted)
			if _, err := api.Release(ctx, connect.NewRequest(&distlockv1.ReleaseRequest{Key: "given-up", Token: held.Msg.GetToken()})); err != nil {
				t.Fatal(err)
			}
		})
	}
}
