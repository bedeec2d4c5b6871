package sqllock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestPostgresWaitQueue: clients that wait for a key on PostgreSQL are
// served in the order they began to wait, a client that tries without
// waiting does not take the key ahead of them, and a wait that ends leaves
// no place in the queue behind.
func TestPostgresWaitQueue(t *testing.T) {
	st := postgres(t)
	admin := st.open(t)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := testContext(t, time.Minute)
	if err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	// queued counts the sessions holding or waiting for key's queue lock.
	queued := func() (holding, waiting int) {
		err := admin.DB().QueryRowContext(ctx, `
			SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) FROM pg_locks
			WHERE locktype = 'advisory' AND classid = 1936813169 AND objid = hashtext($1)::oid AND objsubid = 2`, key).Scan(&holding, &waiting)
		if err != nil {
			t.Fatal(err)
		}
		return holding, waiting
	}
	awaitQueued := func(holding, waiting int, what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; {
			h, w := queued()
			if h == holding && w == waiting {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d holding and %d waiting for the queue, want %d and %d", what, h, w, holding, waiting)
			}
			time.Sleep(10 * time.Millisecond) // a poll of the server's state
		}
	}
	type result struct {
		l   *distlock.Lock
		err error
	}
	lockAsync := func(c *distlock.Client, wait time.Duration) <-chan result {
		ch := make(chan result, 1)
		go func() {
			l, err := c.Lock(ctx, key, distlock.WithWait(wait))
			ch <- result{l, err}
		}()
		return ch
	}
	await := func(ch <-chan result, who string) *distlock.Lock {
		t.Helper()
		select {
		case r := <-ch:
			if r.err != nil {
				t.Fatalf("%s: %v", who, r.err)
			}
			return r.l
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not granted within 10s", who)
			return nil
		}
	}

	holder, first, second, third, barger := st.client(t), st.client(t), st.client(t), st.client(t), st.client(t)
	l := mustLockT(t, ctx, holder, key)
	w1 := lockAsync(first, 30*time.Second)
	awaitQueued(1, 0, "the first waiter heads the queue")
	w2 := lockAsync(second, 30*time.Second)
	awaitQueued(1, 1, "the second waiter queues")
	w3 := lockAsync(third, 500*time.Millisecond) // gives up
	awaitQueued(1, 2, "the third waiter queues")
	r3 := <-w3
	if !errors.Is(r3.err, distlock.ErrNotAcquired) {
		t.Fatalf("the third waiter: %v, want ErrNotAcquired", r3.err)
	}
	awaitQueued(1, 1, "the third waiter's place is gone with its wait")

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l1 := await(w1, "the first waiter")
	awaitQueued(1, 0, "the second waiter heads the queue")
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if lb, err := barger.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		if lb != nil {
			_ = lb.Release(ctx)
		}
		t.Fatalf("a try while a client is queued: %v, want ErrNotAcquired", err)
	}
	l2 := await(w2, "the second waiter")
	if l2.Fence() <= l1.Fence() {
		t.Fatalf("fence %d not above %d", l2.Fence(), l1.Fence())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitQueued(0, 0, "the queue is empty")
	lb, err := barger.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("a try once nobody waits: %v", err)
	}
	_ = lb.Release(ctx)
}

func mustLockT(t *testing.T, ctx context.Context, c *distlock.Client, key string) *distlock.Lock {
	t.Helper()
	l, err := c.Lock(ctx, key, distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("lock %q: %v", key, err)
	}
	return l
}

// TestPostgresCloseGivesUpQueuePlaces: a backend closed while its waiter
// heads a key's queue gives the place up itself, before it closes its
// database handle, whether or not the waiter has left by then: a place
// left to the waiter could find the handle closed, and its session's lock
// would then block the key for every client until the server noticed the
// connection gone.
func TestPostgresCloseGivesUpQueuePlaces(t *testing.T) {
	st := postgres(t)
	ctx := testContext(t, time.Minute)
	admin := st.open(t)
	t.Cleanup(func() { _ = admin.Close() })
	if err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey(t)
	waiter := st.open(t)
	_, leave, err := waiter.Watch(ctx, key) // heads key's queue
	if err != nil {
		t.Fatal(err)
	}
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	defer leave() // the waiter leaves only after Close
	c := distlock.New(st.open(t))
	defer c.Close()
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock after the queue's head was closed: %v", err)
	}
	_ = l.Release(ctx)
}
