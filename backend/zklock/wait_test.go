package zklock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/internal/faultproxy"
)

// granted is the outcome of a Lock in a goroutine.
type granted struct {
	l   *distlock.Lock
	err error
}

// lockAsync locks key in a goroutine and returns where the outcome comes.
func lockAsync(ctx context.Context, c *distlock.Client, key string, opts ...distlock.Option) <-chan granted {
	ch := make(chan granted, 1)
	go func() {
		l, err := c.Lock(ctx, key, opts...)
		ch <- granted{l, err}
	}()
	return ch
}

// await returns the outcome of a Lock, failing the test after within.
func await(t *testing.T, ch <-chan granted, within time.Duration, who string) granted {
	t.Helper()
	select {
	case g := <-ch:
		return g
	case <-time.After(within):
		t.Fatalf("%s: no answer within %v", who, within)
		return granted{}
	}
}

// notYet fails the test if the Lock has already returned.
func notYet(t *testing.T, ch <-chan granted, who string) {
	t.Helper()
	select {
	case g := <-ch:
		t.Fatalf("%s returned (%v) while the key is held", who, g.err)
	default:
	}
}

// holdsWithNode checks that l's node is first in its queue: a grant without
// a node of its own would let another client in.
func holdsWithNode(t *testing.T, q []string, l *distlock.Lock, who string) {
	t.Helper()
	if len(q) == 0 || !strings.Contains(q[0], l.Token()) {
		t.Fatalf("%s holds the lock but its node is not first in the queue %q", who, q)
	}
}

// TestWaitersQueueAgainWhenTheirNodesVanish deletes the nodes of two waiters
// behind a holder, as an operator would: the waiter just behind the holder
// (which is granted without a listing when the holder goes) and the one
// behind it (which lists the queue when its predecessor goes). Both must
// queue again, keep waiting, and each be granted with its own node first in
// the queue, one after the other.
func TestWaitersQueueAgainWhenTheirNodesVanish(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := distlock.New(dial(t, srv.Addr(), root))
	defer holder.Close()
	cs := []*distlock.Client{distlock.New(dial(t, srv.Addr(), root)), distlock.New(dial(t, srv.Addr(), root))}
	for _, c := range cs {
		defer c.Close()
	}
	const key = "vanishing-waiters"
	l := mustLock(t, ctx, holder, key)
	var waits []<-chan granted
	for i, c := range cs {
		waits = append(waits, lockAsync(ctx, c, key, distlock.WithWait(30*time.Second)))
		awaitQueue(t, conn, root, key, "a waiter queues", queueLen(i+2))
	}
	deleted := queue(t, conn, root, key)[1:]
	deleteWaiters(t, conn, root, key)
	awaitQueue(t, conn, root, key, "both waiters queue again", func(q []string) bool {
		return len(q) == 3 && !slices.Contains(q, deleted[0]) && !slices.Contains(q, deleted[1])
	})
	for _, w := range waits {
		notYet(t, w, "a waiter whose node was deleted")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := l.Fence()
	for range waits {
		var g granted
		select {
		case g = <-waits[0]:
		case g = <-waits[1]:
		case <-time.After(10 * time.Second):
			t.Fatal("no waiter granted within 10s of the release")
		}
		if g.err != nil {
			t.Fatalf("waiter: %v", g.err)
		}
		holdsWithNode(t, queue(t, conn, root, key), g.l, "the granted waiter")
		if g.l.Fence() <= last {
			t.Fatalf("fence %d not above the previous %d", g.l.Fence(), last)
		}
		last = g.l.Fence()
		if err := g.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWaitWithoutNodeEndsNotAcquired deletes a waiter's node and lets its
// wait run out: the error matches ErrNotAcquired and nothing of the waiter
// stays in the queue.
func TestWaitWithoutNodeEndsNotAcquired(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := distlock.New(dial(t, srv.Addr(), root))
	defer holder.Close()
	waiter := distlock.New(dial(t, srv.Addr(), root))
	defer waiter.Close()
	const key = "vanishing-budget"
	l := mustLock(t, ctx, holder, key)
	defer l.Release(ctx)
	w := lockAsync(ctx, waiter, key, distlock.WithWait(1500*time.Millisecond))
	awaitQueue(t, conn, root, key, "the waiter queues", queueLen(2))
	deleteWaiters(t, conn, root, key)
	g := await(t, w, 10*time.Second, "the waiter")
	if !errors.Is(g.err, distlock.ErrNotAcquired) {
		t.Fatalf("wait ended with %v, want ErrNotAcquired", g.err)
	}
	if q := queue(t, conn, root, key); len(q) != 1 {
		t.Fatalf("after the wait the queue is %q, want only the holder", q)
	}
}

// TestWaiterSessionExpired partitions a waiter from ZooKeeper until the
// server expires its session, which deletes its node; go-zookeeper then
// opens a new session. The waiter must queue again on it and be granted
// when the holder releases.
func TestWaiterSessionExpired(t *testing.T) {
	srv := zkServer(t)
	proxy := faultproxy.Start(t, srv.Addr())
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := distlock.New(dial(t, srv.Addr(), root))
	defer holder.Close()
	waiter := distlock.New(dial(t, proxy.Addr(), root, zklock.WithSessionTimeout(2*time.Second)))
	defer waiter.Close()
	const key = "expired-waiter"
	l := mustLock(t, ctx, holder, key)
	w := lockAsync(ctx, waiter, key, distlock.WithWait(45*time.Second))
	first := awaitQueue(t, conn, root, key, "the waiter queues", queueLen(2))[1]
	proxy.Blackhole()
	awaitQueue(t, conn, root, key, "the server expires the waiter's session", queueLen(1))
	proxy.Restore()
	awaitQueue(t, conn, root, key, "the waiter queues again on a new session", func(q []string) bool {
		return len(q) == 2 && q[1] != first
	})
	notYet(t, w, "the waiter whose session expired")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := await(t, w, 10*time.Second, "the waiter")
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	defer g.l.Release(ctx)
	holdsWithNode(t, queue(t, conn, root, key), g.l, "the waiter")
	if g.l.Fence() <= l.Fence() {
		t.Fatalf("fence %d not above the holder's %d", g.l.Fence(), l.Fence())
	}
}

func mustLock(t *testing.T, ctx context.Context, c *distlock.Client, key string) *distlock.Lock {
	t.Helper()
	l, err := c.Lock(ctx, key, distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("lock %q: %v", key, err)
	}
	return l
}

// TestLeaseOfHolderGrantedAfterWait: a waiter two places back watches its
// predecessor, a waiter, without timing a lease. When that predecessor is
// granted and then neither renews nor releases, the waiter behind it must
// still take over once the lease has run out (the holder touches its node
// after a wait, which tells the waiter it is next), and not before.
func TestLeaseOfHolderGrantedAfterWait(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var cs [3]*distlock.Client
	for i := range cs {
		cs[i] = distlock.New(dial(t, srv.Addr(), root))
		defer cs[i].Close()
	}
	const key, lease = "deep-queue-lease", 600 * time.Millisecond
	first := mustLock(t, ctx, cs[0], key)
	second := lockAsync(ctx, cs[1], key, distlock.WithLease(lease), distlock.WithWait(30*time.Second))
	awaitQueue(t, conn, root, key, "the second queues", queueLen(2))
	third := lockAsync(ctx, cs[2], key, distlock.WithWait(30*time.Second))
	awaitQueue(t, conn, root, key, "the third queues", queueLen(3))
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := await(t, second, 10*time.Second, "the second")
	if g.err != nil {
		t.Fatalf("second: %v", g.err)
	}
	granted := time.Now()
	h := await(t, third, 10*time.Second, "the third, once the second's lease ran out")
	if h.err != nil {
		t.Fatalf("third: %v", h.err)
	}
	defer h.l.Release(ctx)
	if waited := time.Since(granted); waited < lease-lease/100-2*time.Millisecond {
		t.Fatalf("the third took over %v after the second's grant, before its lease of %v", waited, lease)
	}
	select {
	case <-g.l.Done():
	default:
		t.Fatal("the third was granted before the second's Done closed")
	}
	holdsWithNode(t, queue(t, conn, root, key), h.l, "the third")
}
