package pglock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// TestSessionFaults ends and stalls the sessions behind held and waiting
// locks on a real server.
func TestSessionFaults(t *testing.T) {
	s := testserver.Postgres(t)
	admin := newPool(t, s, 4)
	t.Run("ReleaseDuringRenewal", func(t *testing.T) { releaseDuringRenewal(t, s, admin) })
	t.Run("TerminatedSessionNoticedAtOnce", func(t *testing.T) { terminatedNoticedAtOnce(t, s, admin) })
	t.Run("TerminatedDuringWatchDelay", func(t *testing.T) { terminatedDuringWatchDelay(t, s, admin) })
	t.Run("WatchDelayBound", func(t *testing.T) { watchDelayBound(t, s, admin) })
	t.Run("TerminatedWaiterWaitsOn", func(t *testing.T) { terminatedWaiterWaitsOn(t, s, admin) })
	t.Run("ForceRelease", func(t *testing.T) { forceRelease(t, s) })
	t.Run("ForceReleaseNeedsOption", func(t *testing.T) { forceReleaseNeedsOption(t, s) })
}

// waitFor polls cond every 10ms until it holds, and fails the test if it
// does not within d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond) // a poll of the server's state, not a guess at timing
	}
}

// waitersOf counts the sessions waiting in the queue of id's advisory lock.
func waitersOf(t testing.TB, admin *pgxpool.Pool, id int64) int {
	t.Helper()
	var n int
	err := admin.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
		  AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, id).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// terminateWaiters ends the sessions waiting for id's advisory lock and
// reports how many it ended.
func terminateWaiters(t testing.TB, admin *pgxpool.Pool, id int64) int {
	t.Helper()
	var n int
	err := admin.QueryRow(context.Background(), `
		SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
		  AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, id).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// releaseSignal is a backend that reports its first Release call.
type releaseSignal struct {
	driver.Backend
	once   sync.Once
	called chan struct{}
}

func (b *releaseSignal) Release(ctx context.Context, key, token string) error {
	b.once.Do(func() { close(b.called) })
	return b.Backend.Release(ctx, key, token)
}

// releaseDuringRenewal releases a lock while its watchdog renewal waits on
// the server: the renewal must finish on the connection, not kill it, and
// the release must succeed.
func releaseDuringRenewal(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	be := &releaseSignal{Backend: newBackend(t, newPool(t, s, 2)), called: make(chan struct{})}
	c := distlock.New(be)
	defer c.Close()
	key := uniqueKey(t)
	l, err := c.TryLock(ctx, key, distlock.WithLease(30*time.Second), distlock.WithWatchdog(true),
		distlock.WithRenewInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// A transaction holding the holder row's row lock stalls the renewal.
	tx, err := admin.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM distlock_pg_locks WHERE lock_key = $1 FOR UPDATE`, key); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a renewal waiting for the row", func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity a JOIN distlock_pg_locks m ON m.pid = a.pid
			WHERE m.lock_key = $1 AND a.wait_event_type = 'Lock'`, key).Scan(&n)
		return err == nil && n == 1
	})
	released := make(chan error, 1)
	go func() { released <- l.Release(ctx) }()
	select {
	case <-be.called: // the client cancelled the renewal and calls the backend
	case <-time.After(10 * time.Second):
		t.Fatal("Release did not reach the backend within 10s")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-released:
		if err != nil {
			t.Fatalf("Release during a renewal: %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release did not return within 10s of the renewal's end")
	}
	other := distlock.New(newBackend(t, newPool(t, s, 1)))
	defer other.Close()
	l2, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("the key is not free after Release: %v", err)
	}
	_ = l2.Release(ctx)
}

// terminatedNoticedAtOnce ends the session of a hold older than the watch
// delay, with the default keepalive (5s), and measures how soon the holder is told and how soon a
// waiting client gets the key, over several runs.
func terminatedNoticedAtOnce(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	a := distlock.New(newBackend(t, newPool(t, s, 2)))
	b := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer a.Close()
	defer b.Close()
	const runs = 10
	var lost, taken []time.Duration
	for range runs {
		key := uniqueKey(t)
		l, err := a.TryLock(ctx, key) // 30s lease, keepalive every 5s
		if err != nil {
			t.Fatal(err)
		}
		watched := time.Now().Add(2 * pglock.DefaultWatchDelay)
		got := make(chan time.Time, 1)
		go func() {
			l2, err := b.Lock(ctx, key, distlock.WithWait(10*time.Second))
			at := time.Now()
			if err == nil {
				_ = l2.Release(ctx)
			}
			got <- at
		}()
		waitFor(t, 10*time.Second, "the waiter in the lock's queue", func() bool { return waitersOf(t, admin, pglock.KeyID(key)) == 1 })
		// A hold that outlived the watch delay: its connection is watched
		// (TerminatedDuringWatchDelay ends one that is not yet).
		time.Sleep(time.Until(watched))
		start := time.Now()
		if n := terminateHolder(t, admin, pglock.KeyID(key)); n != 1 {
			t.Fatalf("terminated %d sessions, want 1", n)
		}
		select {
		case <-l.Done():
			lost = append(lost, time.Since(start))
		case <-time.After(time.Second):
			t.Fatal("a terminated session was not reported lost within 1s (the keepalive runs every 5s)")
		}
		select {
		case at := <-got:
			taken = append(taken, at.Sub(start))
		case <-time.After(10 * time.Second):
			t.Fatal("the waiter did not get the key")
		}
		if !errors.Is(l.Err(), distlock.ErrLockLost) {
			t.Fatalf("Err = %v, want ErrLockLost", l.Err())
		}
	}
	slices.Sort(lost)
	slices.Sort(taken)
	t.Logf("over %d runs, from pg_terminate_backend: holder's Done after %v–%v (median %v); another client's grant after %v–%v (median %v)",
		runs, lost[0], lost[runs-1], lost[runs/2], taken[0], taken[runs-1], taken[runs/2])
}

// terminatedDuringWatchDelay ends the holder's session right after the
// grant, before its connection is watched (default delay, 5ms), while
// another client waits in the lock's queue, and measures how soon the holder
// is told and how soon the waiter gets the key, over several runs.
func terminatedDuringWatchDelay(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	first := distlock.New(newBackend(t, newPool(t, s, 2))) // holds the key while the others queue
	a := distlock.New(newBackend(t, newPool(t, s, 2)))
	b := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer first.Close()
	defer a.Close()
	defer b.Close()
	type grant struct {
		l   *distlock.Lock
		at  time.Time
		err error
	}
	lock := func(c *distlock.Client, key string, got chan<- grant) {
		l, err := c.Lock(ctx, key, distlock.WithWait(10*time.Second))
		got <- grant{l, time.Now(), err}
	}
	const runs = 10
	var ages, lost, taken []time.Duration
	for range runs {
		key := uniqueKey(t)
		id := pglock.KeyID(key)
		l0, err := first.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		gotA, gotB := make(chan grant, 1), make(chan grant, 1)
		go lock(a, key, gotA)
		waitFor(t, 10*time.Second, "the first waiter in the lock's queue", func() bool { return waitersOf(t, admin, id) == 1 })
		go lock(b, key, gotB)
		waitFor(t, 10*time.Second, "the second waiter in the lock's queue", func() bool { return waitersOf(t, admin, id) == 2 })
		if err := l0.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var ga grant
		select {
		case ga = <-gotA:
		case <-time.After(10 * time.Second):
			t.Fatal("the first waiter did not get the released key within 10s")
		}
		if ga.err != nil {
			t.Fatal(ga.err)
		}
		start := time.Now()
		if n := terminateHolder(t, admin, id); n != 1 {
			t.Fatalf("terminated %d sessions, want 1", n)
		}
		ages = append(ages, start.Sub(ga.at))
		select {
		case <-ga.l.Done():
			lost = append(lost, time.Since(start))
		case <-time.After(time.Second):
			t.Fatal("a session terminated within the watch delay was not reported lost within 1s (the keepalive runs every 5s)")
		}
		select {
		case gb := <-gotB:
			if gb.err != nil {
				t.Fatal(gb.err)
			}
			taken = append(taken, gb.at.Sub(start))
			_ = gb.l.Release(ctx)
		case <-time.After(10 * time.Second):
			t.Fatal("the second waiter did not get the key")
		}
		if !errors.Is(ga.l.Err(), distlock.ErrLockLost) {
			t.Fatalf("Err = %v, want ErrLockLost", ga.l.Err())
		}
	}
	slices.Sort(ages)
	slices.Sort(lost)
	slices.Sort(taken)
	t.Logf("over %d runs, terminated %v–%v after the grant (median %v); from pg_terminate_backend: holder's Done after %v–%v (median %v); another client's grant after %v–%v (median %v)",
		runs, ages[0], ages[runs-1], ages[runs/2], lost[0], lost[runs-1], lost[runs/2], taken[0], taken[runs-1], taken[runs/2])
}

// watchDelayBound ends the holder's session right after the grant, with a
// watch delay long enough that the end certainly falls within it and with
// none: the holder is told once the watch starts, within 1.25 delays of the
// grant, not at the keepalive (5s).
func watchDelayBound(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	for _, delay := range []time.Duration{200 * time.Millisecond, 0} {
		c := distlock.New(newBackend(t, newPool(t, s, 2), pglock.WithWatchDelay(delay)))
		defer c.Close()
		key := uniqueKey(t)
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		if n := terminateHolder(t, admin, pglock.KeyID(key)); n != 1 {
			t.Fatalf("terminated %d sessions, want 1", n)
		}
		terminated := time.Since(granted)
		select {
		case <-l.Done():
			t.Logf("watch delay %v: terminated %v after the grant, told %v after it", delay, terminated, time.Since(granted))
		case <-time.After(2 * time.Second): // a loaded machine may start the watch late, but not 5s late
			t.Fatalf("watch delay %v: a session terminated %v after the grant was not reported lost within 2s (keepalive 5s)", delay, terminated)
		}
		if !errors.Is(l.Err(), distlock.ErrLockLost) {
			t.Fatalf("Err = %v, want ErrLockLost", l.Err())
		}
	}
}

// terminatedWaiterWaitsOn ends the session of a waiter in the lock's queue:
// it waits on in a new session and gets the key once released.
func terminatedWaiterWaitsOn(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	a := distlock.New(newBackend(t, newPool(t, s, 2)))
	b := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer a.Close()
	defer b.Close()
	key := uniqueKey(t)
	l, err := a.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *distlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l2, err := b.Lock(ctx, key, distlock.WithWait(20*time.Second))
		got <- result{l2, err}
	}()
	id := pglock.KeyID(key)
	waitFor(t, 10*time.Second, "the waiter in the lock's queue", func() bool { return waitersOf(t, admin, id) == 1 })
	if n := terminateWaiters(t, admin, id); n != 1 {
		t.Fatalf("terminated %d waiting sessions, want 1", n)
	}
	waitFor(t, 10*time.Second, "the waiter back in the queue on a new session", func() bool { return waitersOf(t, admin, id) == 1 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("a waiter whose session was ended: %v, want the lock", r.err)
		}
		if r.l.Fence() <= l.Fence() {
			t.Fatalf("fence %d not above %d", r.l.Fence(), l.Fence())
		}
		_ = r.l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the released key within 10s")
	}
}

// forceRelease frees a held key through another backend: the holder's
// Renew and Release get ErrNotHeld, another client gets the key at once
// with a higher fence, and a free key is refused without a change.
func forceRelease(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	holder := newBackend(t, newPool(t, s, 2))
	op := newBackend(t, newPool(t, s, 2), pglock.WithTerminateOnForceRelease(true))
	other := newBackend(t, newPool(t, s, 2))
	defer holder.Close()
	defer op.Close()
	defer other.Close()
	key, bystander := uniqueKey(t), uniqueKey(t)
	req := driver.AcquireRequest{Key: key, Token: "0123456789abcdef0123456789abcdef", TTL: 30 * time.Second,
		Meta: driver.Meta{Owner: "nightly", Labels: map[string]string{"job": "report"}}}
	g, err := holder.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	// What ForceRelease returns is in the hold's row.
	waitFor(t, 10*time.Second, "the holder row", func() bool {
		info, err := op.Inspect(ctx, key)
		return err == nil && info.Meta.Owner == "nightly"
	})
	byReq := driver.AcquireRequest{Key: bystander, Token: "fedcba9876543210fedcba9876543210", TTL: 30 * time.Second}
	if _, err := holder.Acquire(ctx, byReq); err != nil {
		t.Fatal(err)
	}

	if _, err := op.ForceRelease(ctx, uniqueKey(t), driver.ForceOptions{}); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("ForceRelease of a free key: %v, want ErrNotHeld", err)
	}
	if info, err := op.Inspect(ctx, bystander); err != nil || !info.Held {
		t.Fatalf("after ForceRelease of a free key, another key: %+v, %v; want it still held", info, err)
	}

	info, err := op.ForceRelease(ctx, key, driver.ForceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Key != key || info.Fence != g.Fence || info.Meta.Owner != "nightly" ||
		info.Meta.Labels["job"] != "report" || info.TTL <= 0 || info.TTL > req.TTL {
		t.Fatalf("ForceRelease = %+v, want the hold it ended (fence %d, owner, labels, a TTL up to %v)", info, g.Fence, req.TTL)
	}
	g2, err := other.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "00000000000000000000000000000001", TTL: time.Minute})
	if err != nil {
		t.Fatalf("another client could not take the key right after ForceRelease: %v", err)
	}
	if g2.Fence <= g.Fence {
		t.Fatalf("fence %d after ForceRelease not above %d", g2.Fence, g.Fence)
	}
	select {
	case <-g.Lost.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told within 5s")
	}
	if err := holder.Renew(ctx, key, req.Token, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the old holder's Renew: %v, want ErrNotHeld", err)
	}
	if err := holder.Release(ctx, key, req.Token); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("the old holder's Release: %v, want ErrNotHeld", err)
	}
	if info, err := other.Inspect(ctx, key); err != nil || !info.Held || info.Fence != g2.Fence {
		t.Fatalf("after the old holder's Release: %+v, %v; want the new holder's fence %d", info, err, g2.Fence)
	}
	if err := other.Release(ctx, key, "00000000000000000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if err := holder.Release(ctx, bystander, byReq.Token); err != nil {
		t.Fatal(err)
	}
}

// forceReleaseNeedsOption checks that ForceRelease refuses, saying why,
// without WithTerminateOnForceRelease, and ends no session.
func forceReleaseNeedsOption(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	c := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer c.Close()
	be := newBackend(t, newPool(t, s, 1))
	defer be.Close()
	key := uniqueKey(t)
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	_, err = be.ForceRelease(ctx, key, driver.ForceOptions{})
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "WithTerminateOnForceRelease") {
		t.Fatalf("ForceRelease without the option: %v, want ErrUnsupported naming WithTerminateOnForceRelease", err)
	}
	if l.Err() != nil {
		t.Fatalf("the refused ForceRelease ended the lock: %v", l.Err())
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("the lock after a refused ForceRelease: %v", err)
	}
}
