package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// TestForceRelease frees a held key as an operator would: it reports the
// hold it ended, the old holder's Renew and Release get ErrNotHeld and free
// nothing, a queued waiter is granted, and with nobody waiting another
// client acquires at once with a higher fence.
func TestForceRelease(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli, prefix := admin(t, eps), uniquePrefix(t)
	op, old := dial(t, eps, prefix), dial(t, eps, prefix)
	defer op.Close()
	defer old.Close()
	other := distlock.New(dial(t, eps, prefix))
	defer other.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "forced"

	if _, err := op.ForceRelease(ctx, key, driver.ForceOptions{}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free key: got %v, want ErrNotHeld", err)
	}
	req := driver.AcquireRequest{Key: key, Token: "old", TTL: 10 * time.Second, Meta: driver.Meta{Owner: "alice"}}
	g, err := old.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	waiter := waitFor(ctx, other, key, distlock.WithWait(30*time.Second))
	queuedBehind(t, cli, prefix, key, waiter)

	info, err := op.ForceRelease(ctx, key, driver.ForceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Key != key || info.Fence != g.Fence || info.Meta.Owner != "alice" || info.TTL <= 0 || info.TTL > 10*time.Second {
		t.Fatalf("ForceRelease reported %+v, want the hold with fence %d, owner alice and a TTL", info, g.Fence)
	}
	l := granted(t, waiter)
	if l.Fence() <= g.Fence {
		t.Fatalf("waiter's fence %d not above the forced hold's %d", l.Fence(), g.Fence)
	}
	select {
	case <-g.Lost.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the old holder's Grant.Lost not done within 5s")
	}
	if err := old.Renew(ctx, key, req.Token, req.TTL); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("old holder's Renew: got %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx, key, req.Token); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("old holder's Release: got %v, want ErrNotHeld", err)
	}
	if in, err := op.Inspect(ctx, key); err != nil || !in.Held || in.Fence != l.Fence() {
		t.Fatalf("after the old holder's Release the key is %+v (%v), want still held by fence %d", in, err, l.Fence())
	}

	info, err = op.ForceRelease(ctx, key, driver.ForceOptions{})
	if err != nil || info.Fence != l.Fence() {
		t.Fatalf("second ForceRelease: %+v, %v; want fence %d", info, err, l.Fence())
	}
	l2, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock right after ForceRelease: %v", err)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after ForceRelease not above %d", l2.Fence(), l.Fence())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if q := entries(t, cli, prefix, key); len(q) != 0 {
		t.Fatalf("queue after everything was released: %q", q)
	}
}
