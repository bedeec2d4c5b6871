package server_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// watch starts a Watch of prefix and returns its events once it is live
// (Watch returns when the stream's headers come), and a function that waits
// for the stream's end and returns its error. It ends with t.
func watch(t *testing.T, api distlockv1connect.LockServiceClient, prefix string) (<-chan *distlockv1.Event, func() error) {
	t.Helper()
	wctx, cancel := context.WithCancel(context.Background())
	stream, err := api.Watch(wctx, connect.NewRequest(&distlockv1.WatchRequest{Prefix: prefix}))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	events := make(chan *distlockv1.Event, 100)
	done := make(chan struct{})
	var end error
	go func() {
		defer close(done)
		defer close(events)
		for stream.Receive() {
			select {
			case events <- stream.Msg().GetEvent():
			case <-wctx.Done():
				return
			}
		}
		end = stream.Err()
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = stream.Close()
	})
	return events, func() error {
		select {
		case <-done:
			return end
		case <-time.After(10 * time.Second):
			return errors.New("the watch did not end within 10s")
		}
	}
}

// Grants, releases, expiries and forced releases under a prefix arrive in
// order: those made through the watched server at once, those through
// another server at its next poll; keys outside the prefix never.
func TestWatchEvents(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		limits := server.Limits{WatchInterval: 100 * time.Millisecond}
		e, other := newEnv(t, st, limits), newEnv(t, st, limits)
		api := e.api(alphaClient)
		prefix := keyFor(t, "")
		events, _ := watch(t, e.api(alphaViewer), prefix)

		expect := func(what string, typ distlockv1.Event_Type, key string, fence uint64) *distlockv1.Event {
			t.Helper()
			ev := nextEvent(t, events, key)
			if ev.GetType() != typ || (fence != 0 && ev.GetLock().GetFence() != fence) {
				t.Errorf("%s: event %v, want %v of %q with fence %d", what, ev, typ, key, fence)
			}
			if ev.GetTime() == nil || time.Since(ev.GetTime().AsTime()) > time.Minute {
				t.Errorf("%s: event time %v", what, ev.GetTime())
			}
			return ev
		}

		a := acquire(t, api, &distlockv1.AcquireRequest{Key: prefix + "a", Owner: "alice", Lease: durationpb.New(time.Minute)})
		ev := expect("acquire", distlockv1.Event_TYPE_ACQUIRED, prefix+"a", a.GetFence())
		if !ev.GetLock().GetHeld() || ev.GetLock().GetOwner() != "alice" {
			t.Errorf("acquire event's lock %v, want held by alice", ev.GetLock())
		}
		if got, want := ev.GetLock().GetLabels(), inspect(t, api, prefix+"a").GetLabels(); !maps.Equal(got, want) {
			t.Errorf("acquire event's labels %v, want the lock's %v", got, want)
		}
		if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: prefix + "a", Token: a.GetToken()})); err != nil {
			t.Fatal(err)
		}
		ev = expect("release", distlockv1.Event_TYPE_RELEASED, prefix+"a", a.GetFence())
		if ev.GetLock().GetHeld() || ev.GetLock().GetOwner() != "alice" {
			t.Errorf("release event's lock %v, want alice's hold, no longer held", ev.GetLock())
		}

		b := acquire(t, api, &distlockv1.AcquireRequest{Key: prefix + "b", Lease: durationpb.New(2 * time.Second)})
		expect("acquire to expire", distlockv1.Event_TYPE_ACQUIRED, prefix+"b", b.GetFence())
		expect("expiry", distlockv1.Event_TYPE_EXPIRED, prefix+"b", b.GetFence())

		c := acquire(t, api, &distlockv1.AcquireRequest{Key: prefix + "c", Lease: durationpb.New(time.Minute)})
		expect("acquire to force", distlockv1.Event_TYPE_ACQUIRED, prefix+"c", c.GetFence())
		if _, err := e.api(opsAdmin).ForceRelease(ctx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{
			Key: prefix + "c", Tenant: "alpha", Reason: "stuck job"})); err != nil {
			t.Fatal(err)
		}
		expect("forced release", distlockv1.Event_TYPE_FORCE_RELEASED, prefix+"c", c.GetFence())

		// Through another server: the watched one learns by polling.
		oapi := other.api(alphaClient)
		d := acquire(t, oapi, &distlockv1.AcquireRequest{Key: prefix + "d", Lease: durationpb.New(time.Minute)})
		expect("acquire elsewhere", distlockv1.Event_TYPE_ACQUIRED, prefix+"d", d.GetFence())
		if _, err := oapi.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: prefix + "d", Token: d.GetToken()})); err != nil {
			t.Fatal(err)
		}
		expect("release elsewhere", distlockv1.Event_TYPE_RELEASED, prefix+"d", d.GetFence())

		// Another tenant's and another prefix's changes never show.
		acquire(t, e.api(betaClient), &distlockv1.AcquireRequest{Key: prefix + "e", Lease: durationpb.New(time.Minute)})
		acquire(t, api, &distlockv1.AcquireRequest{Key: "elsewhere/" + prefix + "e", Lease: durationpb.New(time.Minute)})
		f := acquire(t, api, &distlockv1.AcquireRequest{Key: prefix + "f", Lease: durationpb.New(time.Minute)})
		if ev := nextEventAny(t, events); ev.GetLock().GetKey() != prefix+"f" || ev.GetLock().GetFence() != f.GetFence() {
			t.Errorf("after changes out of sight, event %v, want the grant of %q", ev, prefix+"f")
		}
	})
}

// nextEventAny returns the next event, within 10s.
func nextEventAny(t *testing.T, events <-chan *distlockv1.Event) *distlockv1.Event {
	t.Helper()
	select {
	case ev, ok := <-events:
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return nil
}

// nextEvent returns the next event about key, skipping others, within 10s.
func nextEvent(t *testing.T, events <-chan *distlockv1.Event, key string) *distlockv1.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the watch ended before an event about %q", key)
			}
			if ev.GetLock().GetKey() == key {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event about %q within 10s", key)
		}
	}
}

// A release that reaches the watchers after the key was granted to a
// waiter is the release of the earlier hold: it must not end the waiter's
// hold in the stream (nor in the dashboard's view), whose own release must
// then show. Each round: A holds, B waits, A releases; the stream must show
// A's release and B's grant in either order, and then B's release.
func TestWatchReleaseOfAnEarlierHold(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		// Polls of the whole prefix an hour apart: the events are the
		// calls' own and the readings the store's notices ask for.
		e := newEnv(t, st, server.Limits{WatchInterval: time.Hour})
		api := e.api(alphaClient)
		prefix := keyFor(t, "")
		events, _ := watch(t, e.api(alphaViewer), prefix)
		viewer, ok := e.srv.Identify(alphaViewer)
		if !ok {
			t.Fatal("the viewer's token is unknown")
		}
		e.srv.Monitor(viewer, prefix) // the dashboard's view, kept while it is asked for
		for round := range 10 {
			key := fmt.Sprintf("%sk%d", prefix, round)
			a := acquire(t, api, &distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(time.Minute)})
			if ev := nextEvent(t, events, key); ev.GetType() != distlockv1.Event_TYPE_ACQUIRED {
				t.Fatalf("round %d: %v, want A's grant", round, ev)
			}
			granted := make(chan *distlockv1.AcquireResponse, 1)
			go func() {
				res, err := api.Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: key,
					Lease: durationpb.New(time.Minute), Wait: durationpb.New(10 * time.Second)}))
				if err != nil {
					t.Error(err)
					close(granted)
					return
				}
				granted <- res.Msg
			}()
			eventually(t, 5*time.Second, "B waits", func() bool { return gauge(t, e, "distlock_server_waiting") == 1 })
			if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: a.GetToken()})); err != nil {
				t.Fatal(err)
			}
			b, ok := <-granted
			if !ok {
				return
			}
			view, _ := e.srv.Monitor(viewer, prefix)
			if !slices.ContainsFunc(view.Locks, func(l server.HeldLock) bool { return l.Key == key && l.Fence == b.GetFence() }) {
				t.Errorf("round %d: the dashboard's view lacks B's hold (fence %d) after A's release: %+v", round, b.GetFence(), view.Locks)
			}
			var sawRelease, sawGrant bool
			for !sawRelease || !sawGrant {
				ev := nextEvent(t, events, key)
				switch f := ev.GetLock().GetFence(); {
				case ev.GetType() == distlockv1.Event_TYPE_RELEASED && f == a.GetFence() && !sawRelease:
					sawRelease = true
				case ev.GetType() == distlockv1.Event_TYPE_ACQUIRED && f == b.GetFence() && !sawGrant:
					sawGrant = true
				default:
					t.Fatalf("round %d: %v of fence %d, want A's release (fence %d) and B's grant (fence %d)",
						round, ev.GetType(), f, a.GetFence(), b.GetFence())
				}
			}
			if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: b.GetToken()})); err != nil {
				t.Fatal(err)
			}
			if ev := nextEvent(t, events, key); ev.GetType() != distlockv1.Event_TYPE_RELEASED || ev.GetLock().GetFence() != b.GetFence() {
				t.Fatalf("round %d: %v of fence %d, want B's release (fence %d)", round, ev.GetType(), ev.GetLock().GetFence(), b.GetFence())
			}
		}
	})
}
