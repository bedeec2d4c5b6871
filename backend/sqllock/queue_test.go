package sqllock_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
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
	admin := st.admin(t)
	ctx := testContext(t, time.Minute)
	key := uniqueKey(t)
	awaitQueued := func(holding, waiting int, what string) {
		t.Helper()
		awaitQueue(t, ctx, admin.DB(), key, holding, waiting, what)
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
	st.admin(t) // makes the tables
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

// TestPostgresCutQueueWaitLeavesNoPlace: a wait that ends while its
// backend waits for its place in the key's queue (inside pg_advisory_lock,
// behind an earlier head) leaves no place behind, however late the server
// hears of the wait's end. When the context of a statement ends, pgx drops
// the connection at once but ends the server's session only afterwards, in
// the background: a cancel request on a new connection, then Terminate.
// Until they arrive the abandoned session waits on in the queue, and is
// granted the place when the earlier head leaves. Here the cancel request
// is lost on the way (a relay holds it), which keeps that window open as
// long as the test needs.
func TestPostgresCutQueueWaitLeavesNoPlace(t *testing.T) {
	st := postgres(t)
	admin := st.admin(t)
	ctx := testContext(t, time.Minute)
	key := uniqueKey(t)
	holder := st.client(t)
	l := mustLockT(t, ctx, holder, key)

	// An earlier head of the queue, so that the waiter waits inside
	// pg_advisory_lock.
	head, err := admin.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer head.Close()
	if _, err := head.ExecContext(ctx, "SELECT pg_advisory_lock(1936813169, hashtext($1))", key); err != nil {
		t.Fatal(err)
	}

	waiter := distlock.New(st.openAt(t, cancelLosingRelay(t, st.s.Addr())))
	t.Cleanup(func() { _ = waiter.Close() })
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(wctx, key, distlock.WithWait(time.Minute))
		if err == nil {
			_ = l.Release(ctx)
		}
		done <- err
	}()
	awaitQueue(t, ctx, admin.DB(), key, 1, 1, "the waiter queues behind the earlier head")
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled wait: %v, want ErrNotAcquired joined with context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled wait did not return within 10s")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("the cancelled wait returned after %v", took)
	}

	// The earlier head leaves and the holder releases: the key is free to
	// the client whose wait was cancelled (the conformance suite's
	// ContextCancelWhileWaiting), and then to every client.
	if _, err := head.ExecContext(ctx, "SELECT pg_advisory_unlock(1936813169, hashtext($1))", key); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := waiter.TryLock(ctx, key)
	if err != nil {
		h, w, _ := queueSessions(ctx, admin.DB(), key)
		t.Fatalf("key not free after a cut wait for the queue and a release: %v (queue: %d holding, %d waiting)", err, h, w)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitQueue(t, ctx, admin.DB(), key, 0, 0, "the queue is empty")
	l3, err := st.client(t).TryLock(ctx, key)
	if err != nil {
		t.Fatalf("a try by another client once the queue is empty: %v", err)
	}
	_ = l3.Release(ctx)
}

// queueSessions counts the sessions holding and waiting for key's queue
// lock.
func queueSessions(ctx context.Context, db *sql.DB, key string) (holding, waiting int, err error) {
	err = db.QueryRowContext(ctx, `
		SELECT count(*) FILTER (WHERE granted), count(*) FILTER (WHERE NOT granted) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = 1936813169 AND objid = hashtext($1)::oid AND objsubid = 2`, key).Scan(&holding, &waiting)
	return holding, waiting, err
}

// awaitQueue waits up to 10s for holding sessions to hold key's queue lock
// and waiting ones to wait for it.
func awaitQueue(t *testing.T, ctx context.Context, db *sql.DB, key string, holding, waiting int, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		h, w, err := queueSessions(ctx, db, key)
		if err != nil {
			t.Fatal(err)
		}
		if h == holding && w == waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d holding and %d waiting for the queue, want %d and %d", what, h, w, holding, waiting)
		}
		time.Sleep(10 * time.Millisecond) // a poll of the server's state
	}
}

// cancelLosingRelay relays TCP connections to target from a loopback
// address, which it returns, except PostgreSQL cancel requests: it takes
// those and holds them, unanswered, until the test ends, as a network or a
// pooler in between may lose them.
func cancelLosingRelay(t *testing.T, target string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		closed bool
		conns  []net.Conn
		wg     sync.WaitGroup
	)
	track := func(cs ...net.Conn) bool {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			for _, c := range cs {
				_ = c.Close()
			}
			return false
		}
		conns = append(conns, cs...)
		return true
	}
	relay := func(c net.Conn) {
		defer wg.Done()
		if !track(c) {
			return
		}
		// A connection starts with its message's length and code; a cancel
		// request's are 16 and 80877102.
		var start [8]byte
		if _, err := io.ReadFull(c, start[:]); err != nil {
			_ = c.Close()
			return
		}
		if binary.BigEndian.Uint32(start[:4]) == 16 && binary.BigEndian.Uint32(start[4:]) == 80877102 {
			return // held until the test ends
		}
		up, err := net.Dial("tcp", target)
		if err != nil || !track(up) {
			_ = c.Close()
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(c, up)
			_ = c.Close()
		}()
		if _, err := up.Write(start[:]); err == nil {
			_, _ = io.Copy(up, c)
		}
		_ = up.Close()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go relay(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
