package pglock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
)

// TestRestartLosesLocksKeepsFences restarts PostgreSQL under held locks: the
// holders are told, and the fence sequence carries on above every old grant.
func TestRestartLosesLocksKeepsFences(t *testing.T) {
	s := testserver.Postgres(t)
	ctx := testContext(t, 2*time.Minute)
	c := distlock.New(newBackend(t, newPool(t, s, 4), pglock.WithKeepalive(100*time.Millisecond)))
	defer c.Close()
	k1, k2 := uniqueKey(t), uniqueKey(t)
	l1, err := c.TryLock(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := c.Lock(ctx, k2, distlock.WithWait(time.Second)) // through the native wait
	if err != nil {
		t.Fatal(err)
	}
	top := max(l1.Fence(), l2.Fence())

	s.Restart()
	for _, l := range []*distlock.Lock{l1, l2} {
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not reported lost within 10s of a restart", l.Key())
		}
		if !errors.Is(l.Err(), distlock.ErrLockLost) {
			t.Fatalf("%s: Err = %v, want ErrLockLost", l.Key(), l.Err())
		}
	}

	// The pool may hand out connections that died with the server first.
	var l3 *distlock.Lock
	for range 50 {
		if l3, err = c.TryLock(ctx, k1); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("no lock after the restart: %v", err)
	}
	defer l3.Release(ctx)
	if l3.Fence() <= top {
		t.Fatalf("fence %d after the restart is not above %d from before it", l3.Fence(), top)
	}
	info, err := c.Inspect(context.Background(), k2)
	if err != nil {
		t.Fatal(err)
	}
	if info.Held {
		t.Fatalf("Inspect after the restart: %+v, want the lock gone with its session", info)
	}
}
