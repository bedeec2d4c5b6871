package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// TestForceRelease force-releases a held key on a single node with each
// client library; see forceRelease.
func TestForceRelease(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			rawCommand(t, []string{s.Addr()}, "CONFIG", "RESETSTAT")
			forceRelease(t, func(t testing.TB) driver.Backend { return a.new(t, s.Addr()) }, fixed(s.Addr()))
			if n := publishes(t, s.Addr()); n != 2 {
				t.Fatalf("%d notices published for one force release with a waiter, want 2: the waiter's and the holder's lost notice", n)
			}
		})
	}
}

// forceRelease has an operator's backend force-release a key that a holder
// holds and a waiter of another client waits for: the operator gets what
// the key held, the waiter is woken and gets the key with a higher fence,
// and the old holder's Renew and Release get ErrNotHeld and free nothing. A
// free key is refused with ErrNotHeld and left as it was.
func forceRelease(t *testing.T, newBackend func(t testing.TB) driver.Backend, addrs func() []string) {
	ctx := testContext(t)
	key := "force/" + t.Name()
	holder, operator := newBackend(t), newBackend(t)
	defer holder.Close()
	defer operator.Close()
	waiter := newClient(t, newBackend(t))
	old := driver.AcquireRequest{Key: key, Token: "old-holder", TTL: time.Minute, Meta: driver.Meta{Owner: "batch-7"}}
	g, err := holder.Acquire(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lock, 1)
	failed := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, distlock.WithWait(30*time.Second))
		if err != nil {
			failed <- err
			return
		}
		got <- l
	}()
	eventually(t, "the waiter's refused attempt marks the key", func() error {
		if v := rawCommand(t, addrs(), "GET", lockName(key)); !strings.HasSuffix(v, "\n") {
			return fmt.Errorf("lock value %q has no waiters' mark", v)
		}
		return nil
	})

	fr, ok := operator.(driver.ForceReleaser)
	if !ok {
		t.Fatal("the backend does not implement driver.ForceReleaser")
	}
	start := time.Now()
	info, err := fr.ForceRelease(ctx, key, driver.ForceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Key != key || info.Fence != g.Fence || info.Meta.Owner != "batch-7" || info.TTL <= 0 || info.TTL > time.Minute {
		t.Fatalf("ForceRelease = %+v; want held with fence %d, owner batch-7 and a TTL up to 1m", info, g.Fence)
	}
	var next *distlock.Lock
	select {
	case next = <-got:
		t.Logf("the waiter got the key %v after the force release", time.Since(start).Round(time.Microsecond))
	case err := <-failed:
		t.Fatalf("the waiter failed: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not get the key within 5s of the force release")
	}
	defer next.Release(ctx)
	if next.Fence() <= g.Fence {
		t.Fatalf("fence after the force release %d, not above the old holder's %d", next.Fence(), g.Fence)
	}
	if err := holder.Renew(ctx, key, old.Token, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the old holder's Renew: got %v, want ErrNotHeld", err)
	}
	if err := holder.Release(ctx, key, old.Token); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the old holder's Release: got %v, want ErrNotHeld", err)
	}
	if info, err := operator.Inspect(ctx, key); err != nil || !info.Held || info.Fence != next.Fence() {
		t.Fatalf("after the old holder's Release: %+v, %v; want still held with fence %d", info, err, next.Fence())
	}

	free := key + "/free"
	if _, err := holder.Acquire(ctx, driver.AcquireRequest{Key: free, Token: "t", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx, free, "t"); err != nil {
		t.Fatal(err)
	}
	before, err := operator.Inspect(ctx, free)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fr.ForceRelease(ctx, free, driver.ForceOptions{}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free key: got %v, want ErrNotHeld", err)
	}
	if after, err := operator.Inspect(ctx, free); err != nil || after.Held || after.Fence != before.Fence {
		t.Fatalf("a refused ForceRelease changed the key: %+v, %v; before %+v", after, err, before)
	}
	if _, err := fr.ForceRelease(context.Background(), "bad\nkey", driver.ForceOptions{}); !errors.Is(err, driver.ErrInvalidKey) {
		t.Fatalf("ForceRelease of an invalid key: got %v, want ErrInvalidKey", err)
	}
}
