package server_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// cappedEnv is a server over st whose policy caps holds of alpha's keys
// under capped/ at limit.
func cappedEnv(t *testing.T, st store, limit time.Duration) *env {
	return newEnvConfig(t, server.Config{Client: st.open(t), MaxHold: func(sk string) time.Duration {
		if strings.HasPrefix(sk, "tenants/alpha/capped/") {
			return limit
		}
		return 0
	}})
}

// A policy's max hold caps a lock held by hand: Acquire and Renew shorten
// the lease to what is left of the cap, the lock ends there, a renewal after it is
// refused, and the dashboard's view shows the cap and the loss.
func TestMaxHold(t *testing.T) {
	const limit = 1500 * time.Millisecond
	st := stores(t)[1]
	e := cappedEnv(t, st, limit)
	api := e.api(alphaClient)
	c := ctx(t)
	lease := durationpb.New(10 * time.Second)
	capped := acquire(t, api, &distlockv1.AcquireRequest{Key: "capped/job", Lease: lease})
	free := acquire(t, api, &distlockv1.AcquireRequest{Key: "free/job", Lease: lease})
	if got := capped.GetLease().AsDuration(); got != limit {
		t.Errorf("acquire with a lease over the cap: lease %v, want the cap %v", got, limit)
	}

	view, _ := e.srv.Monitor(auth.Identity{Tenant: "alpha", Role: auth.Viewer}, "")
	for _, l := range view.Locks {
		if want := map[string]time.Duration{"capped/job": limit, "free/job": 0}[l.Key]; l.MaxHold != want {
			t.Errorf("view of %s: MaxHold %v, want %v", l.Key, l.MaxHold, want)
		}
	}

	r, err := api.Renew(c, connect.NewRequest(&distlockv1.RenewRequest{Key: "capped/job", Token: capped.GetToken(), Lease: lease}))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Msg.GetLease().AsDuration(); got <= 0 || got > limit {
		t.Errorf("renew under the cap: lease %v, want at most what is left of %v", got, limit)
	}
	r, err = api.Renew(c, connect.NewRequest(&distlockv1.RenewRequest{Key: "free/job", Token: free.GetToken(), Lease: lease}))
	if err != nil || r.Msg.GetLease().AsDuration() != 10*time.Second {
		t.Errorf("renew without a cap: %v, %v; want the 10s asked", r, err)
	}

	var refused error
	eventually(t, 5*time.Second, "a renewal refused at the cap", func() bool {
		_, refused = api.Renew(c, connect.NewRequest(&distlockv1.RenewRequest{Key: "capped/job", Token: capped.GetToken(), Lease: lease}))
		return refused != nil
	})
	wantCode(t, "renew past the cap", refused, connect.CodeNotFound)
	// A renewal is refused once less than a minimum lease is left; the
	// lease the last one got ends at the cap.
	time.Sleep(time.Until(capped.GetExpiresAt().AsTime())) // the grant plus the cap
	eventually(t, time.Second, "the capped lock to end at its cap", func() bool { return !inspect(t, api, "capped/job").GetHeld() })
	eventually(t, 5*time.Second, "the view to record the end as a max hold loss", func() bool {
		view, _ := e.srv.Monitor(auth.Identity{Tenant: "alpha", Role: auth.Viewer}, "")
		for _, l := range view.Losses {
			if l.Key == "capped/job" && l.Kind == server.LossMaxHold {
				return true
			}
		}
		return false
	})
	if !inspect(t, api, "free/job").GetHeld() {
		t.Error("the lock without a cap ended")
	}
}

// The Go client takes the lease the service answers as the truth: a lock
// whose lease the cap cut is reported lost before the store frees the key,
// with an explicit lease and with the watchdog's renewals, and another
// client gets the key only then.
func TestMaxHoldThroughGoClient(t *testing.T) {
	const limit = time.Second
	st := stores(t)[1]
	e := cappedEnv(t, st, limit)
	addr := strings.TrimPrefix(e.url, "http://")
	for _, tc := range []struct {
		name string
		opts []distlock.Option
	}{
		{"explicit lease", []distlock.Option{distlock.WithLease(3 * time.Second)}},
		{"watchdog", []distlock.Option{distlock.WithLease(600 * time.Millisecond), distlock.WithWatchdog(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ctx(t)
			holder := distlock.New(remoteBackendAt(t, addr, alphaClient))
			other := distlock.New(remoteBackendAt(t, addr, alphaClient))
			defer holder.Close()
			defer other.Close()
			key := "capped/" + strings.ReplaceAll(tc.name, " ", "-")
			start := time.Now()
			l, err := holder.TryLock(c, key, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if end := start.Add(limit); l.ExpiresAt().After(end) {
				t.Errorf("ExpiresAt is %v after the cap ends the hold", l.ExpiresAt().Sub(end))
			}
			l2, err := other.Lock(c, key, distlock.WithWait(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Release(c)
			select {
			case <-l.Done():
			default:
				t.Fatalf("another client got the key %v after the grant while the capped holder was not told", time.Since(start))
			}
		})
	}
}
