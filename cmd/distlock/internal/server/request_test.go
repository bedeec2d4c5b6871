package server_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// TestRequestRelease: a holder through the service is asked to release its
// lock: at once through the Watch stream (WithLossWatch), else at its next
// renewal; it keeps the lock; the request is checked, audited and bounded
// to the caller's tenant; and a store that cannot tell holders (here
// memlock with its capabilities hidden) still has the service tell them.
func TestRequestRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	check := func(t *testing.T, e *env) {
		holderBackend := func(opts ...remotelock.Option) *distlock.Client {
			b, err := remotelock.New(e.h2c, e.url, append([]remotelock.Option{remotelock.WithToken(alphaClient)}, opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			c := distlock.New(b)
			t.Cleanup(func() { _ = c.Close() })
			return c
		}
		watching, plain, asker := holderBackend(remotelock.WithLossWatch()), holderBackend(), holderBackend()
		c := ctx(t)
		warm, err := watching.TryLock(c, keyFor(t, "warm")) // the stream starts with the first grant
		if err != nil {
			t.Fatal(err)
		}
		_ = warm.Release(c)
		time.Sleep(500 * time.Millisecond) // and misses what comes before it is live

		key := keyFor(t, "job")
		l, err := watching.TryLock(c, key, distlock.WithLease(time.Minute), distlock.WithOwner("nightly"))
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		info, err := asker.RequestRelease(c, key, "deploy at 02:00")
		if err != nil || info.Fence != l.Fence() || info.Meta.Owner != "nightly" {
			t.Fatalf("request release = %+v, %v; want the hold of fence %d", info, err, l.Fence())
		}
		select {
		case <-l.ReleaseRequested():
			t.Logf("the holder following the stream was told after %v", time.Since(start).Round(time.Millisecond))
		case <-time.After(5 * time.Second): // its next renewal is 20 s away
			t.Fatal("the holder following the stream was not told within 5s")
		}
		if l.ReleaseReason() != "deploy at 02:00" || l.Err() != nil {
			t.Fatalf("after the request: reason %q, err %v", l.ReleaseReason(), l.Err())
		}
		_ = l.Release(c)

		key = keyFor(t, "plain")
		p, err := plain.TryLock(c, key, distlock.WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := asker.RequestRelease(c, key, "please"); err != nil {
			t.Fatal(err)
		}
		if err := p.Renew(c); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.ReleaseRequested():
		case <-time.After(2 * time.Second):
			t.Fatal("a holder without the stream was not told at its renewal")
		}
		_ = p.Release(c)
		if !strings.Contains(e.logs.String(), `"msg":"release requested"`) || !strings.Contains(e.logs.String(), `"reason":"please"`) {
			t.Errorf("the audit log has no request:\n%s", e.logs.String())
		}

		// Checks: bad reasons, a viewer, another tenant, a free key.
		held, err := plain.TryLock(c, key)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Release(c) }()
		api := e.api(alphaClient)
		for _, reason := range []string{"", " ", strings.Repeat("x", distlock.MaxRequestReason+1)} {
			_, err := api.RequestRelease(c, connect.NewRequest(&distlockv1.RequestReleaseRequest{Key: key, Reason: reason}))
			wantCode(t, "reason of "+strconv.Itoa(len(reason))+" bytes", err, connect.CodeInvalidArgument)
		}
		_, err = e.api(alphaViewer).RequestRelease(c, connect.NewRequest(&distlockv1.RequestReleaseRequest{Key: key, Reason: "x"}))
		wantCode(t, "viewer", err, connect.CodePermissionDenied)
		resp, err := e.api(betaClient).RequestRelease(c, connect.NewRequest(&distlockv1.RequestReleaseRequest{Key: key, Reason: "x"}))
		if err != nil || resp.Msg.GetLock().GetHeld() {
			t.Fatalf("another tenant's request: %v, %v; want its own free key", resp, err)
		}
		select {
		case <-held.ReleaseRequested():
			t.Fatal("a refused or other tenant's request reached the holder")
		default:
		}
		if _, err := asker.RequestRelease(c, key+"/free", "x"); !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("request for a free key: %v, want ErrNotHeld", err)
		}
	}
	forEachStore(t, func(t *testing.T, st store) { check(t, newEnv(t, st, server.Limits{})) })
	t.Run("store that cannot tell", func(t *testing.T) {
		check(t, newEnvClient(t, distlock.New(noRequests{Backend: memlock.New()}), server.Limits{}))
	})
}

// noRequests is memlock without driver.ReleaseRequester: the field hides
// the method, and every other capability stays.
type noRequests struct {
	*memlock.Backend
	RequestRelease struct{}
}
