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

// acquirePermit takes a permit of name (of permits) or fails t.
func acquirePermit(t *testing.T, api distlockv1connect.LockServiceClient, req *distlockv1.AcquirePermitRequest) *distlockv1.AcquirePermitResponse {
	t.Helper()
	res, err := api.AcquirePermit(ctx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("AcquirePermit %q: %v", req.GetName(), err)
	}
	return res.Msg
}

// TestPermits: a semaphore over the service holds at most its permits,
// each with a token, a lease and an increasing fence; a waiter gets one
// when one is given back; renewals and releases go by token; the number
// of permits changes only explicitly; and another tenant sees nothing of
// it.
func TestPermits(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "pool")
		minute := durationpb.New(time.Minute)
		a := acquirePermit(t, api, &distlockv1.AcquirePermitRequest{Name: name, Permits: 2, Lease: minute, Owner: "worker-a"})
		b := acquirePermit(t, api, &distlockv1.AcquirePermitRequest{Name: name, Permits: 2, Lease: minute})
		if a.GetToken() == "" || a.GetToken() == b.GetToken() || b.GetFence() <= a.GetFence() || a.GetLease().AsDuration() != time.Minute {
			t.Fatalf("two permits: %v and %v; want tokens of their own, fences increasing, a minute's lease", a, b)
		}
		_, err := api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: name, Permits: 2}))
		wantCode(t, "a third permit of two", err, connect.CodeAborted)
		_, err = api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: name, Permits: 3}))
		wantCode(t, "a permit of another number", err, connect.CodeInvalidArgument)

		got := make(chan *distlockv1.AcquirePermitResponse, 1)
		go func() {
			res, err := api.AcquirePermit(context.Background(), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: name, Permits: 2, Wait: durationpb.New(20 * time.Second)}))
			if err != nil {
				t.Errorf("the waiting AcquirePermit: %v", err)
			}
			got <- res.Msg
		}()
		eventually(t, 10*time.Second, "the AcquirePermit waits", func() bool { return gauge(t, e, "distlock_server_waiting") == 1 })
		if _, err := api.RenewPermit(ctx(t), connect.NewRequest(&distlockv1.RenewPermitRequest{Name: name, Token: a.GetToken()})); err != nil {
			t.Fatalf("RenewPermit: %v", err)
		}
		_, err = api.RenewPermit(ctx(t), connect.NewRequest(&distlockv1.RenewPermitRequest{Name: name, Token: strings.Repeat("0", 32)}))
		wantCode(t, "RenewPermit by a token with no permit", err, connect.CodeNotFound)
		if _, err := api.ReleasePermit(ctx(t), connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: name, Token: a.GetToken()})); err != nil {
			t.Fatalf("ReleasePermit: %v", err)
		}
		var c *distlockv1.AcquirePermitResponse
		select {
		case c = <-got:
		case <-time.After(15 * time.Second):
			t.Fatal("the waiter got no permit within 15s of a release")
		}
		if c.GetFence() <= b.GetFence() {
			t.Errorf("the waiter's fence %d, want above %d", c.GetFence(), b.GetFence())
		}
		_, err = api.ReleasePermit(ctx(t), connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: name, Token: a.GetToken()}))
		wantCode(t, "a second release", err, connect.CodeNotFound)

		info, err := e.api(alphaViewer).InspectPermits(ctx(t), connect.NewRequest(&distlockv1.InspectPermitsRequest{Name: name}))
		if err != nil || info.Msg.GetPermits() != 2 || len(info.Msg.GetHeld()) != 2 {
			t.Fatalf("InspectPermits: %v, %v; want 2 permits, both held", info, err)
		}
		for _, p := range info.Msg.GetHeld() {
			if p.GetKey() != name || !p.GetHeld() || p.GetFence() == 0 || strings.Contains(p.String(), b.GetToken()) {
				t.Errorf("a permit shown as %v: want the name, held, a fence, and no token", p)
			}
		}
		other, err := e.api(betaClient).InspectPermits(ctx(t), connect.NewRequest(&distlockv1.InspectPermitsRequest{Name: name}))
		if err != nil || other.Msg.GetPermits() != 0 || len(other.Msg.GetHeld()) != 0 {
			t.Errorf("another tenant's InspectPermits of the name: %v, %v; want nothing", other, err)
		}
		if _, err := e.api(betaClient).AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: name, Permits: 1})); err != nil {
			t.Errorf("another tenant's semaphore of the same name: %v", err)
		}

		if _, err := api.SetPermits(ctx(t), connect.NewRequest(&distlockv1.SetPermitsRequest{Name: name, Permits: 3})); err != nil {
			t.Fatalf("SetPermits: %v", err)
		}
		acquirePermit(t, api, &distlockv1.AcquirePermitRequest{Name: name, Permits: 3})
		_, err = e.api(alphaViewer).AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: name, Permits: 3}))
		wantCode(t, "a viewer's AcquirePermit", err, connect.CodePermissionDenied)
	})
}

// TestPermitRetry: a retried AcquirePermit with the same request id gets
// the same token and fence and takes no second permit, while the first is
// held; without a request id each call takes a permit of its own.
func TestPermitRetry(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "pool")
		req := &distlockv1.AcquirePermitRequest{Name: name, Permits: 2, RequestId: "7f0c8b8e-1f4e-4d43-9d0e-6c1b7a1e2f3a", Wait: durationpb.New(time.Second)}
		first := acquirePermit(t, api, req)
		again := acquirePermit(t, api, req)
		if again.GetToken() != first.GetToken() || again.GetFence() != first.GetFence() {
			t.Fatalf("a retry: %v, want the first grant %v", again, first)
		}
		info, err := api.InspectPermits(ctx(t), connect.NewRequest(&distlockv1.InspectPermitsRequest{Name: name}))
		if err != nil || len(info.Msg.GetHeld()) != 1 {
			t.Fatalf("after a retry: %v, %v; want one permit held", info, err)
		}
		acquirePermit(t, api, &distlockv1.AcquirePermitRequest{Name: name, Permits: 2})
		_, err = api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: name, Permits: 2}))
		wantCode(t, "a third call without a request id", err, connect.CodeAborted)
	})
}

// TestPermitsBadInput: bad names, numbers, leases and tokens are refused
// with InvalidArgument before any store call.
func TestPermitsBadInput(t *testing.T) {
	e := newEnv(t, stores(t)[0], server.Limits{})
	api := e.api(alphaClient)
	for what, call := range map[string]func() error{
		"no name": func() error {
			_, err := api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Permits: 1}))
			return err
		},
		"zero permits": func() error {
			_, err := api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: "s", Permits: 0}))
			return err
		},
		"negative permits": func() error {
			_, err := api.SetPermits(ctx(t), connect.NewRequest(&distlockv1.SetPermitsRequest{Name: "s", Permits: -1}))
			return err
		},
		"a lease of a nanosecond": func() error {
			_, err := api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: "s", Permits: 1, Lease: durationpb.New(1)}))
			return err
		},
		"a reserved label": func() error {
			_, err := api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: "s", Permits: 1, Labels: map[string]string{"distlock.permit": "x"}}))
			return err
		},
		"no token": func() error {
			_, err := api.ReleasePermit(ctx(t), connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: "s"}))
			return err
		},
		"a control character": func() error {
			_, err := api.InspectPermits(ctx(t), connect.NewRequest(&distlockv1.InspectPermitsRequest{Name: "s\x00"}))
			return err
		},
	} {
		wantCode(t, what, call(), connect.CodeInvalidArgument)
	}
	info, err := api.InspectPermits(ctx(t), connect.NewRequest(&distlockv1.InspectPermitsRequest{Name: "s"}))
	if err != nil || info.Msg.GetPermits() != 0 {
		t.Errorf("after the refusals: %v, %v; want the semaphore untouched", info, err)
	}
}

// TestEveryProcedureIsGuarded calls every method of the LockService
// without a token: each is refused Unauthenticated, so no method can be
// added to the API without the guard knowing it.
func TestEveryProcedureIsGuarded(t *testing.T) {
	e := newEnv(t, stores(t)[0], server.Limits{})
	methods := distlockv1.File_distlock_v1_lock_proto.Services().ByName("LockService").Methods()
	for i := range methods.Len() {
		path := "/distlock.v1.LockService/" + string(methods.Get(i).Name())
		req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, e.url+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := e.h1.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: HTTP %d, want 401", path, res.StatusCode)
		}
	}
}

// TestPermitMaxHold: a policy's max hold caps a permit as it caps a lock:
// the grant's lease is cut to the cap, renewals to what is left of it, a
// renewal past it is refused, and a retry by request id cannot renew it
// past the cap either (past its end, a retry is a new permit).
func TestPermitMaxHold(t *testing.T) {
	const limit = 1500 * time.Millisecond
	e := cappedEnv(t, stores(t)[1], limit)
	api := e.api(alphaClient)
	lease := durationpb.New(10 * time.Second)
	req := &distlockv1.AcquirePermitRequest{Name: "capped/pool", Permits: 2, Lease: lease, RequestId: "0b7e9f52-9a43-4c1e-8d41-2f6a3c5e7d90"}
	p := acquirePermit(t, api, req)
	if got := p.GetLease().AsDuration(); got != limit {
		t.Errorf("a permit with a lease over the cap: lease %v, want the cap %v", got, limit)
	}
	r, err := api.RenewPermit(ctx(t), connect.NewRequest(&distlockv1.RenewPermitRequest{Name: "capped/pool", Token: p.GetToken(), Lease: lease}))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Msg.GetLease().AsDuration(); got <= 0 || got > limit {
		t.Errorf("renew under the cap: lease %v, want at most what is left of %v", got, limit)
	}
	var refused error
	eventually(t, 5*time.Second, "a renewal refused at the cap", func() bool {
		_, refused = api.RenewPermit(ctx(t), connect.NewRequest(&distlockv1.RenewPermitRequest{Name: "capped/pool", Token: p.GetToken(), Lease: lease}))
		return refused != nil
	})
	wantCode(t, "renew past the cap", refused, connect.CodeNotFound)
	// A retry finds the capped permit and is refused, or finds it ended at
	// its cap and takes a new one: never the old one renewed.
	if again, err := api.AcquirePermit(ctx(t), connect.NewRequest(req)); err == nil && again.Msg.GetFence() == p.GetFence() {
		t.Errorf("a retry past the cap renewed the permit: %v", again.Msg)
	}
}

// TestPermitRetryWhileWaiting: a retry sent while the first call still
// waits (its caller timed out, say) takes no second permit: both calls
// answer the one permit, and only one is held. The first call says it is
// the first (first_try), as the clients send it; the retry does not.
func TestPermitRetryWhileWaiting(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "pool")
		held := acquirePermit(t, api, &distlockv1.AcquirePermitRequest{Name: name, Permits: 1})
		answers := make(chan *distlockv1.AcquirePermitResponse, 2)
		call := func(firstTry bool) {
			req := &distlockv1.AcquirePermitRequest{Name: name, Permits: 1, RequestId: "5d2f8a61-3c7b-4e09-a1f4-9b8c6d2e0f17",
				Wait: durationpb.New(20 * time.Second), FirstTry: firstTry}
			res, err := api.AcquirePermit(context.Background(), connect.NewRequest(req))
			if err != nil {
				t.Errorf("a waiting AcquirePermit (first_try %v): %v", firstTry, err)
				answers <- nil
				return
			}
			answers <- res.Msg
		}
		go call(true)
		eventually(t, 10*time.Second, "the first call waits", func() bool { return gauge(t, e, "distlock_server_waiting") == 1 })
		go call(false)
		time.Sleep(300 * time.Millisecond) // the retry in: it waits for the first call
		if _, err := api.ReleasePermit(ctx(t), connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: name, Token: held.GetToken()})); err != nil {
			t.Fatal(err)
		}
		a, b := <-answers, <-answers
		if a == nil || b == nil {
			t.FailNow()
		}
		if a.GetToken() != b.GetToken() || a.GetFence() != b.GetFence() {
			t.Errorf("the call and its retry answered %v and %v, want one permit", a, b)
		}
		info, err := api.InspectPermits(ctx(t), connect.NewRequest(&distlockv1.InspectPermitsRequest{Name: name}))
		if err != nil || len(info.Msg.GetHeld()) != 1 {
			t.Errorf("after a call and its retry: %v, %v; want one permit held", info, err)
		}
	})
}

// TestPermitRetryGivesUp: a retry waiting behind its first call (both
// waiting on a full semaphore) ends when its own caller gives up, not when
// the first call does.
func TestPermitRetryGivesUp(t *testing.T) {
	e := newEnv(t, stores(t)[1], server.Limits{})
	api := e.api(alphaClient)
	name := keyFor(t, "pool")
	held := acquirePermit(t, api, &distlockv1.AcquirePermitRequest{Name: name, Permits: 1})
	req := &distlockv1.AcquirePermitRequest{Name: name, Permits: 1, RequestId: "9e8d7c6b-5a49-4382-b1c0-d9e8f7a6b5c4", Wait: durationpb.New(30 * time.Second)}
	first := make(chan error, 1)
	fctx, stopFirst := context.WithCancel(context.Background())
	defer stopFirst()
	go func() {
		_, err := api.AcquirePermit(fctx, connect.NewRequest(req))
		first <- err
	}()
	eventually(t, 10*time.Second, "the first call waits", func() bool { return gauge(t, e, "distlock_server_waiting") == 1 })
	rctx, cancel := context.WithTimeout(ctx(t), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := api.AcquirePermit(rctx, connect.NewRequest(req))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("a retry whose caller gave up after 0.5s: %v after %v, want an error within a few seconds", err, time.Since(start))
	}
	// The server ends the retry's call too, while the first still waits.
	eventually(t, 5*time.Second, "the server to end the retry's call", func() bool {
		for _, code := range []string{"canceled", "deadline_exceeded"} {
			if gauge(t, e, `distlock_server_requests_total{code="`+code+`",method="AcquirePermit"}`) > 0 {
				return true
			}
		}
		return false
	})
	stopFirst()
	<-first
	if _, err := api.ReleasePermit(ctx(t), connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: name, Token: held.GetToken()})); err != nil {
		t.Fatal(err)
	}
}

// TestPermitCount: a call of count permits takes them as one hold, which
// InspectPermits shows with its count and which renews and releases by its
// token; a count over the permits, or an intent with one permit, is
// refused; a call of several that waits keeps a later single call out.
func TestPermitCount(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "conns")
		take := func(count int32, wait time.Duration) (*distlockv1.AcquirePermitResponse, error) {
			res, err := api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: name, Permits: 3,
				Count: count, Lease: durationpb.New(time.Minute), Wait: durationpb.New(wait)}))
			if err != nil {
				return nil, err
			}
			return res.Msg, nil
		}
		two, err := take(2, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = take(2, 0)
		wantCode(t, "2 more of 3 beside a hold of 2", err, connect.CodeAborted)
		info, err := api.InspectPermits(ctx(t), connect.NewRequest(&distlockv1.InspectPermitsRequest{Name: name}))
		if err != nil || len(info.Msg.GetHeld()) != 1 || info.Msg.GetHeld()[0].GetPermits() != 2 {
			t.Fatalf("InspectPermits = %v, %v; want one hold of 2", info, err)
		}
		_, err = take(4, 0)
		wantCode(t, "4 of 3 permits", err, connect.CodeInvalidArgument)
		_, err = take(-1, 0)
		wantCode(t, "a count of -1", err, connect.CodeInvalidArgument)
		_, err = api.AcquirePermit(ctx(t), connect.NewRequest(&distlockv1.AcquirePermitRequest{Name: name, Permits: 3, Intent: "single-intent"}))
		wantCode(t, "an intent with one permit", err, connect.CodeInvalidArgument)

		waiting := make(chan error, 1)
		go func() { // all 3: waits for the hold of 2
			res, err := take(3, 20*time.Second)
			if err == nil {
				_, err = api.ReleasePermit(context.Background(), connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: name, Token: res.GetToken()}))
			}
			waiting <- err
		}()
		eventually(t, 10*time.Second, "a single call refused behind the waiting call of 3", func() bool {
			res, err := take(1, 0)
			if err == nil {
				_, _ = api.ReleasePermit(ctx(t), connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: name, Token: res.GetToken()}))
			}
			return connect.CodeOf(err) == connect.CodeAborted
		})
		if _, err := api.RenewPermit(ctx(t), connect.NewRequest(&distlockv1.RenewPermitRequest{Name: name, Token: two.GetToken()})); err != nil {
			t.Errorf("RenewPermit of the hold of 2: %v", err)
		}
		if _, err := api.ReleasePermit(ctx(t), connect.NewRequest(&distlockv1.ReleasePermitRequest{Name: name, Token: two.GetToken()})); err != nil {
			t.Fatal(err)
		}
		if err := <-waiting; err != nil {
			t.Fatalf("the call of 3 after the hold of 2 was released: %v", err)
		}
	})
}
