package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// TestForceRelease frees a held key from a third session: it returns what
// the holder's node said, the waiter behind it is granted through its watch
// with a higher fence, the old holder's Renew and Release get ErrNotHeld and
// free nothing, and the old holder is told. A free key returns ErrNotHeld;
// a key forced free with nobody waiting can be taken at once.
func TestForceRelease(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := distlock.New(dial(t, srv.Addr(), root))
	defer a.Close()
	b := distlock.New(dial(t, srv.Addr(), root))
	defer b.Close()
	operator := dial(t, srv.Addr(), root)
	defer operator.Close()

	const key = "forced"
	old, err := a.Lock(ctx, key, distlock.WithOwner("svc-a"), distlock.WithBusinessID("order-7"))
	if err != nil {
		t.Fatal(err)
	}
	w := lockAsync(ctx, b, key, distlock.WithWait(30*time.Second))
	awaitQueue(t, conn, root, key, "the waiter queues", queueLen(2))
	start := time.Now()
	info, err := operator.ForceRelease(ctx, key, driver.ForceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Key != key || info.Fence != old.Fence() || info.Meta.Owner != "svc-a" || info.Meta.BusinessID != "order-7" ||
		info.TTL <= 0 || info.TTL > distlock.DefaultLease {
		t.Fatalf("ForceRelease = %+v, want the holder's hold (fence %d, owner, business id, TTL left)", info, old.Fence())
	}
	g := await(t, w, 5*time.Second, "the waiter")
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	t.Logf("waiter granted %v after the force release began", time.Since(start).Round(time.Millisecond))
	if g.l.Fence() <= old.Fence() {
		t.Fatalf("fence %d after the force release, not above %d", g.l.Fence(), old.Fence())
	}
	for op, err := range map[string]error{
		"renew":   a.Backend().Renew(ctx, key, old.Token(), time.Minute),
		"release": a.Backend().Release(ctx, key, old.Token()),
	} {
		if !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("%s by the forced-out token: got %v, want ErrNotHeld", op, err)
		}
	}
	holdsWithNode(t, queue(t, conn, root, key), g.l, "the waiter")
	waitDone(t, old, 5*time.Second, "the forced-out holder")
	if !errors.Is(old.Err(), distlock.ErrLockLost) {
		t.Fatalf("forced-out holder's Err = %v, want ErrLockLost", old.Err())
	}
	if err := g.l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	for _, k := range []string{key, "never-locked"} {
		if _, err := operator.ForceRelease(ctx, k, driver.ForceOptions{}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("ForceRelease of free key %q: got %v, want ErrNotHeld", k, err)
		}
	}

	l, err := a.Lock(ctx, "forced-alone")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.ForceRelease(ctx, "forced-alone", driver.ForceOptions{}); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryLock(ctx, "forced-alone")
	if err != nil {
		t.Fatalf("TryLock right after a force release: %v", err)
	}
	defer l2.Release(ctx)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the force release, not above %d", l2.Fence(), l.Fence())
	}
}
