package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// The read-write lock and semaphore cases pglock adds to locktest's.
func TestRWLocksAndSemaphores(t *testing.T) {
	s := testserver.Postgres(t)
	admin := newPool(t, s, 4)
	t.Run("NoHoldReturnsToPool", func(t *testing.T) { noHoldReturnsToPool(t, s) })
	t.Run("WriteIntentLapsesOrIsWithdrawn", func(t *testing.T) { writeIntentLapses(t, s) })
	t.Run("LoweredLimitGrantsNothingOverIt", func(t *testing.T) { loweredLimit(t, s, admin) })
	t.Run("WeightedHoldAllOrNone", func(t *testing.T) { weightedAllOrNone(t, s, admin) })
	t.Run("LockAndRWLockOfANameExclude", func(t *testing.T) { lockAndRWLock(t, s) })
	t.Run("KilledReaderSessionReportedLost", func(t *testing.T) { killedReader(t, s, admin) })
	t.Run("CallsAfterClose", func(t *testing.T) { rwCallsAfterClose(t, s) })
	t.Run("RenewalMovesTheTimeToLive", func(t *testing.T) { renewalMovesTTL(t, s) })
	t.Run("NamespacesKeptApart", func(t *testing.T) { rwNamespaces(t, s) })
	t.Run("CloseEndsWatches", func(t *testing.T) { closeEndsWatches(t, s) })
	t.Run("CleanupSweepsLeftRows", func(t *testing.T) { cleanupSweepsRWRows(t, s, admin) })
	t.Run("DowngradeOnItsSession", func(t *testing.T) { downgradeOnItsSession(t, s, admin) })
	t.Run("WithdrawnPermitIntentStaysWithdrawn", func(t *testing.T) { withdrawnPermitIntent(t, s) })
}

// An attempt of a withdrawn request for permits that reaches the server
// after the withdrawal (its statement was on its way on another session
// when the wait ended) does not record the intent again: requests without
// one are served at once.
func withdrawnPermitIntent(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	be := newBackend(t, newPool(t, s, 4))
	defer be.Close()
	name := uniqueKey(t)
	req := func(token, intent string, n int) driver.AcquireRequest {
		return driver.AcquireRequest{Key: name, Token: uniqueToken() + token, TTL: time.Minute, Intent: intent, Permits: n}
	}
	hold := req("hold", "", 1)
	if _, err := be.AcquirePermits(ctx, hold, 2); err != nil {
		t.Fatal(err)
	}
	big := req("big", "withdrawn", 2)
	if _, err := be.AcquirePermits(ctx, big, 2); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a request of 2 while 1 is held: %v, want ErrNotAcquired", err)
	}
	if err := be.WithdrawPermitIntent(ctx, name, big.Intent); err != nil {
		t.Fatal(err)
	}
	if _, err := be.AcquirePermits(ctx, big, 2); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a late attempt of the withdrawn request: %v, want ErrNotAcquired", err)
	}
	plain := req("plain", "", 1)
	if _, err := be.AcquirePermit(ctx, plain, 2); err != nil {
		t.Fatalf("a request of 1 with a permit free after a late attempt of a withdrawn request: %v", err)
	}
	for _, r := range []driver.AcquireRequest{hold, plain} {
		if err := be.ReleasePermit(ctx, name, r.Token); err != nil {
			t.Fatal(err)
		}
	}
}

// advisoryModes returns the modes in which sessions hold id's advisory
// lock, and how many sessions wait for it.
func advisoryModes(t *testing.T, ctx context.Context, admin *pgxpool.Pool, id int64) (held []string, waiting int) {
	t.Helper()
	rows, err := admin.Query(ctx, `SELECT mode, granted FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1
		  AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid
		ORDER BY mode`, id)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mode    string
		granted bool
	)
	_, err = pgx.ForEachRow(rows, []any{&mode, &granted}, func() error {
		if granted {
			held = append(held, mode)
		} else {
			waiting++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return held, waiting
}

// A downgrade takes the shared lock beside the exclusive one on the hold's
// own session, even while a lock of the name waits in the server's queue
// (which a conditional attempt would yield to), then drops the exclusive
// one: the waiter stays queued until the hold is released, a watcher is
// woken, and the session goes back to the pool clean. A hold whose row
// vanished is refused and left exclusive.
func downgradeOnItsSession(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	pool := newPool(t, s, 1) // the writer's session comes back to the next user
	c := distlock.New(newBackend(t, pool))
	defer c.Close()
	other := newBackend(t, newPool(t, s, 4))
	c2 := distlock.New(other)
	defer c2.Close()
	name := uniqueKey(t)
	id := pglock.KeyID(name)
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Inspect(ctx); err != nil { // creates the tables first
		t.Fatal(err)
	}
	pid := cleanSession(t, ctx, pool, "nothing")
	w, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lock, 1)
	fail := make(chan error, 1)
	go func() {
		l, err := c2.Lock(ctx, name, distlock.WithWait(30*time.Second))
		if err != nil {
			fail <- err
			return
		}
		got <- l
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, waiting := advisoryModes(t, ctx, admin, id); waiting == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lock's waiter never showed in pg_locks")
		}
	}
	wake, stop, err := other.WatchRW(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := m.Downgrade(ctx, w); err != nil {
		t.Fatalf("Downgrade with a lock waiting in the queue: %v", err)
	}
	select {
	case <-wake:
	case <-time.After(2 * time.Second):
		t.Fatal("no notice of the downgrade within 2s")
	}
	if held, waiting := advisoryModes(t, ctx, admin, id); len(held) != 1 || held[0] != "ShareLock" || waiting != 1 {
		t.Fatalf("after the downgrade: held %v with %d waiting; want ShareLock alone, and the waiter", held, waiting)
	}
	mode, infos, _, err := other.InspectRW(ctx, name)
	if err != nil || mode != driver.Shared || len(infos) != 1 || infos[0].Fence != w.Fence() {
		t.Fatalf("InspectRW after the downgrade: %v, %+v, %v; want one shared hold of fence %d", mode, infos, err, w.Fence())
	}
	select {
	case l := <-got:
		t.Fatalf("the lock's waiter got in beside the downgraded hold (fence %d)", l.Fence())
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(300 * time.Millisecond): // not synchronisation: a chance to break exclusion
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l.Fence() <= w.Fence() {
			t.Errorf("the waiter's fence %d is not above the downgraded hold's %d", l.Fence(), w.Fence())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the lock's waiter never got in after the downgraded hold ended")
	}
	if got := cleanSession(t, ctx, pool, "the release of a downgraded hold"); got != pid {
		t.Errorf("the downgrade or release ended the session %d (now %d)", pid, got)
	}

	w, err = m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	if _, err := admin.Exec(ctx, `DELETE FROM distlock_pg_rw_holds WHERE name = $1`, name); err != nil {
		t.Fatal(err)
	}
	if err := m.Downgrade(ctx, w); err == nil || errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Downgrade of a hold without its row: %v, want an error other than ErrNotHeld", err)
	}
	if held, _ := advisoryModes(t, ctx, admin, id); len(held) != 1 || held[0] != "ExclusiveLock" || w.Err() != nil {
		t.Errorf("after a refused downgrade: held %v, hold error %v; want it still exclusive", held, w.Err())
	}
}

// Cleanup deletes what read-write locks and semaphores leave when a hold
// ends without a release (its session ended): hold and permit rows past
// their lease and retention whose session no longer holds, and lapsed write
// intents and permit intents; a live hold's row stays.
func cleanupSweepsRWRows(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	be := newBackend(t, newPool(t, s, 4), pglock.WithCleanupInterval(0), pglock.WithRetention(time.Millisecond))
	c := distlock.New(be)
	defer c.Close()
	live, err := c.RWMutex(uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	r, err := live.TryRLock(ctx, distlock.WithLease(time.Second), distlock.WithWatchdog(true))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release(ctx)
	left := uniqueKey(t)
	for _, q := range []string{
		`INSERT INTO distlock_pg_rw_holds VALUES ($1, 0, 7, true, 'gone', 1, now() - interval '1 minute', '{}')`,
		`INSERT INTO distlock_pg_rw_intents VALUES ($1, 'gone', now() - interval '1 minute')`,
		`INSERT INTO distlock_pg_permits VALUES ($1, 0, 0, 'gone', 1, now() - interval '1 minute', '{}')`,
		`INSERT INTO distlock_pg_permit_intents (name, intent, expires_at) VALUES ($1, 'gone', now() - interval '1 minute')`,
	} {
		if _, err := admin.Exec(ctx, q, left); err != nil {
			t.Fatal(err)
		}
	}
	// Past the live hold's first lease and the retention: its watchdog
	// renews it (every third of the lease, which leaves a busy machine
	// two thirds of a second to do it).
	time.Sleep(1300 * time.Millisecond)
	for range 100 { // earlier tests left rows too
		n, err := be.Cleanup(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	var holds, intents, permits, permitIntents int
	if err := admin.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM distlock_pg_rw_holds WHERE name = $1),
		(SELECT count(*) FROM distlock_pg_rw_intents WHERE name = $1),
		(SELECT count(*) FROM distlock_pg_permits WHERE name = $1),
		(SELECT count(*) FROM distlock_pg_permit_intents WHERE name = $1)`, left).Scan(&holds, &intents, &permits, &permitIntents); err != nil {
		t.Fatal(err)
	}
	if holds+intents+permits+permitIntents != 0 {
		t.Fatalf("after cleanup: %d hold, %d intent, %d permit and %d permit intent rows left, want none", holds, intents, permits, permitIntents)
	}
	if info, err := live.Inspect(ctx); err != nil || len(info.Held) != 1 || info.Held[0].Fence != r.Fence() {
		t.Fatalf("cleanup touched a live hold: %+v, %v", info, err)
	}
}

// Close of a backend that owns its pool returns promptly while a watch is
// open, and the watch's stop returns after it.
func closeEndsWatches(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	be, err := pglock.Open(ctx, testserver.PostgresDSN(s))
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := be.WatchRW(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- be.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		stop() // lets Close return, so that nothing leaks
		<-closed
		t.Fatal("Close did not return within 5s of a watch left open")
	}
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("a watch's stop after Close did not return within 5s")
	}
}

// Under two namespaces one name is two read-write locks and two
// semaphores: a writer's intent, a limit and the holds of one are not the
// other's.
func rwNamespaces(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	one := newBackend(t, newPool(t, s, 4), pglock.WithNamespace(1))
	defer one.Close()
	two := newBackend(t, newPool(t, s, 4), pglock.WithNamespace(2))
	defer two.Close()
	name := uniqueKey(t)
	reader := driver.AcquireRequest{Key: name, Token: uniqueToken(), TTL: time.Minute}
	if _, err := one.AcquireRW(ctx, reader, driver.Shared); err != nil {
		t.Fatal(err)
	}
	writer := driver.AcquireRequest{Key: name, Token: uniqueToken(), TTL: time.Minute, Intent: "waiting"}
	if _, err := one.AcquireRW(ctx, writer, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer behind a reader: %v, want ErrNotAcquired", err)
	}
	if err := tryRead(ctx, two, name); err != nil {
		t.Errorf("a reader under another namespace than a waiting writer's: %v", err)
	}
	if _, held, n, err := two.InspectRW(ctx, name); err != nil || len(held) != 0 || n != 0 {
		t.Errorf("InspectRW under another namespace: %d held, %d intents, %v; want none", len(held), n, err)
	}
	if err := one.ReleaseRW(ctx, name, reader.Token); err != nil {
		t.Fatal(err)
	}
	permit := driver.AcquireRequest{Key: name, Token: uniqueToken(), TTL: time.Minute}
	if _, err := one.AcquirePermit(ctx, permit, 1); err != nil {
		t.Fatal(err)
	}
	defer one.ReleasePermit(ctx, name, permit.Token)
	if _, err := two.AcquirePermit(ctx, driver.AcquireRequest{Key: name, Token: uniqueToken(), TTL: time.Minute}, 3); err != nil {
		t.Errorf("a semaphore of 3 under another namespace than one of 1: %v", err)
	}
	if limit, held, err := two.InspectPermits(ctx, name); err != nil || limit != 3 || len(held) != 1 {
		t.Errorf("InspectPermits under another namespace: limit %d, %d held, %v; want 3 and its one", limit, len(held), err)
	}
}

// Inspect of another backend reports a renewed hold's new time to live.
func renewalMovesTTL(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	c := distlock.New(newBackend(t, newPool(t, s, 4)))
	defer c.Close()
	other := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer other.Close()
	name := uniqueKey(t)
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	om, err := other.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	osem, err := other.Semaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.TryRLock(ctx, distlock.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx, distlock.WithLease(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []*distlock.Lock{r, p} {
		if err := l.Extend(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	info, err := om.Inspect(ctx)
	if err != nil || len(info.Held) != 1 || info.Held[0].TTL < 50*time.Second {
		t.Errorf("Inspect of a read hold renewed for a minute: %+v, %v", info, err)
	}
	sinfo, err := osem.Inspect(ctx)
	if err != nil || len(sinfo.Held) != 1 || sinfo.Held[0].TTL < 50*time.Second {
		t.Errorf("Inspect of a permit renewed for a minute: %+v, %v", sinfo, err)
	}
	for _, l := range []*distlock.Lock{r, p} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// cleanSession fails t unless the session of the one connection of pool
// holds no advisory lock and listens on no channel, and returns its pid.
func cleanSession(t *testing.T, ctx context.Context, pool *pgxpool.Pool, what string) (pid int32) {
	t.Helper()
	var locks, channels int
	err := pool.QueryRow(ctx, `SELECT pg_backend_pid(),
		(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()),
		(SELECT count(*) FROM pg_listening_channels())`).Scan(&pid, &locks, &channels)
	if err != nil {
		t.Fatal(err)
	}
	if locks != 0 || channels != 0 {
		t.Fatalf("after %s the pooled connection holds %d advisory locks and listens on %d channels", what, locks, channels)
	}
	return pid
}

// A released hold of either mode and a released permit give their
// connection back unlocked and alive; an expired one leaves none locked in
// the pool; a watch gives its connection back without its LISTEN.
func noHoldReturnsToPool(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	pool := newPool(t, s, 1)
	c := distlock.New(newBackend(t, pool))
	defer c.Close()
	name := uniqueKey(t)
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	// The first use creates the tables: an attempt that found them missing
	// ends its session, as any failed attempt does.
	if _, err := m.Inspect(ctx); err != nil {
		t.Fatal(err)
	}
	pid := cleanSession(t, ctx, pool, "nothing")
	for _, take := range []struct {
		what string
		f    func(...distlock.Option) (*distlock.Lock, error)
	}{
		{"a read hold", func(o ...distlock.Option) (*distlock.Lock, error) { return m.TryRLock(ctx, o...) }},
		{"a write hold", func(o ...distlock.Option) (*distlock.Lock, error) { return m.TryLock(ctx, o...) }},
		{"a permit", func(o ...distlock.Option) (*distlock.Lock, error) { return sem.TryAcquire(ctx, o...) }},
	} {
		l, err := take.f()
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if got := cleanSession(t, ctx, pool, "the release of "+take.what); got != pid {
			t.Errorf("the release of %s ended the session %d (now %d): an unlock must give it back", take.what, pid, got)
		}
		l, err = take.f(distlock.WithLease(100 * time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("a lease of 100ms of %s did not end within 10s", take.what)
		}
		// The pool has one connection: it is free only once the keepalive
		// round ended the hold.
		pid = cleanSession(t, ctx, pool, "the expiry of "+take.what)
	}
	be := newBackend(t, pool)
	defer be.Close()
	for _, watch := range []func(context.Context, string) (<-chan struct{}, func(), error){be.WatchRW, be.WatchPermits} {
		_, stop, err := watch(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if got := cleanSession(t, ctx, pool, "a watch"); got != pid {
			t.Errorf("a watch ended the session %d (now %d)", pid, got)
		}
	}
}

// tryRead makes one read attempt for a fresh token and releases what it got.
func tryRead(ctx context.Context, be *pglock.Backend, name string) error {
	req := driver.AcquireRequest{Key: name, Token: uniqueToken(), TTL: time.Minute}
	if _, err := be.AcquireRW(ctx, req, driver.Shared); err != nil {
		return err
	}
	return be.ReleaseRW(ctx, name, req.Token)
}

// uniqueToken returns a token no other attempt uses.
func uniqueToken() string { return fmt.Sprintf("token-%d-%d", time.Now().UnixNano(), seq.Add(1)) }

// A writer refused behind a reader records its intent, which keeps readers
// out until WriteIntentTTL after its last attempt, or until withdrawn,
// which wakes a watcher.
func writeIntentLapses(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	be := newBackend(t, newPool(t, s, 4))
	defer be.Close()
	name := uniqueKey(t)
	reader := driver.AcquireRequest{Key: name, Token: uniqueToken(), TTL: time.Minute}
	if _, err := be.AcquireRW(ctx, reader, driver.Shared); err != nil {
		t.Fatal(err)
	}
	writer := driver.AcquireRequest{Key: name, Token: uniqueToken(), TTL: time.Minute, Intent: "vanished"}
	if _, err := be.AcquireRW(ctx, writer, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer behind a reader: %v, want ErrNotAcquired", err)
	}
	recorded := time.Now()
	if _, _, n, err := be.InspectRW(ctx, name); err != nil || n != 1 {
		t.Fatalf("InspectRW after a refused writer with an intent: %d intents, %v; want 1", n, err)
	}
	for {
		err := tryRead(ctx, be, name)
		if err == nil {
			break
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatal(err)
		}
		if time.Since(recorded) > 10*time.Second {
			t.Fatal("a vanished writer's intent kept readers out for 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The server's clock started the intent's life before the reply left.
	if d := time.Since(recorded); d < driver.WriteIntentTTL-100*time.Millisecond {
		t.Errorf("readers came in %v after the intent, before WriteIntentTTL (%v)", d, driver.WriteIntentTTL)
	}
	if _, _, n, err := be.InspectRW(ctx, name); err != nil || n != 0 {
		t.Fatalf("InspectRW after the intent lapsed: %d intents, %v; want 0", n, err)
	}

	writer.Intent = "waiting"
	if _, err := be.AcquireRW(ctx, writer, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer behind a reader: %v, want ErrNotAcquired", err)
	}
	if err := tryRead(ctx, be, name); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a reader behind a waiting writer: %v, want ErrNotAcquired", err)
	}
	wake, stop, err := be.WatchRW(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if err := be.WithdrawIntent(ctx, name, "waiting"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("withdrawing an intent woke no watcher")
	}
	if err := tryRead(ctx, be, name); err != nil {
		t.Fatalf("a reader once the intent was withdrawn: %v", err)
	}
	// An attempt of the withdrawn wait that lands after the withdrawal (its
	// statement was on its way when the wait ended, on another session)
	// does not record the intent again.
	if _, err := be.AcquireRW(ctx, writer, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer behind a reader: %v, want ErrNotAcquired", err)
	}
	if err := tryRead(ctx, be, name); err != nil {
		t.Fatalf("a reader after a late attempt of a withdrawn wait: %v", err)
	}
	// A lapsed intent, not withdrawn, is recorded again by its writer's
	// next attempt (as "vanished" above, had it come back).
	writer.Intent = "vanished"
	if _, err := be.AcquireRW(ctx, writer, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a writer behind a reader: %v, want ErrNotAcquired", err)
	}
	if err := tryRead(ctx, be, name); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a reader behind a writer whose lapsed intent came back: %v, want ErrNotAcquired", err)
	}
	if err := be.WithdrawIntent(ctx, name, "vanished"); err != nil {
		t.Fatal(err)
	}
	if err := be.ReleaseRW(ctx, name, reader.Token); err != nil {
		t.Fatal(err)
	}
}

// Lowered under the permits held, a semaphore grants none until fewer than
// its new limit are held, then works at the new limit; raised, it grants up
// to it.
func loweredLimit(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	c := distlock.New(newBackend(t, newPool(t, s, 8)))
	defer c.Close()
	name := uniqueKey(t)
	three, err := c.Semaphore(name, 3)
	if err != nil {
		t.Fatal(err)
	}
	var held []*distlock.Lock
	for range 3 {
		l, err := three.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	one, err := c.Semaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := one.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		p, err := one.TryAcquire(ctx)
		if i < len(held)-1 {
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("a permit of 1 while %d are held: %v, want ErrNotAcquired", len(held)-1-i, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("a permit of 1 once none is held: %v", err)
		}
		if _, err := one.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a second permit of 1: %v, want ErrNotAcquired", err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var slots int
	if err := admin.QueryRow(ctx, `SELECT slots FROM distlock_pg_semaphores WHERE name = $1`, name).Scan(&slots); err != nil || slots != 1 {
		t.Errorf("slots after the lowering ended: %d, %v; want 1", slots, err)
	}
	four, err := c.Semaphore(name, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := four.SetPermits(ctx, 4); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		l, err := four.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("permit %d of 4 after raising: %v", i+1, err)
		}
		defer l.Release(ctx)
	}
	if _, err := four.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a fifth permit of 4: %v, want ErrNotAcquired", err)
	}
}

// A hold of several permits takes its slots all or none, on one session: a
// request refused for want of room leaves no slot locked, though it found
// some free; a granted one locks its slots on one session, and its release
// unlocks them all.
func weightedAllOrNone(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	be := newBackend(t, newPool(t, s, 8))
	c := distlock.New(be)
	defer c.Close()
	name := uniqueKey(t)
	sem, err := c.Semaphore(name, 4)
	if err != nil {
		t.Fatal(err)
	}
	var singles []*distlock.Lock
	for range 2 {
		l, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		singles = append(singles, l)
	}
	locked := func(what string, sessions, slots int) {
		t.Helper()
		var gotSessions, gotSlots int
		if err := admin.QueryRow(ctx, `SELECT count(DISTINCT pid), count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::integer::oid`,
			be.SlotKey(name)).Scan(&gotSessions, &gotSlots); err != nil {
			t.Fatal(err)
		}
		if gotSessions != sessions || gotSlots != slots {
			t.Fatalf("%s: %d slots locked by %d sessions, want %d by %d", what, gotSlots, gotSessions, slots, sessions)
		}
	}
	if _, err := sem.TryAcquireN(ctx, 3); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("3 of 4 permits beside 2 held: %v, want ErrNotAcquired", err)
	}
	locked("after a refused request of 3 that found 2 free", 2, 2)
	if err := singles[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	three, err := sem.TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatalf("3 of 4 permits beside 1 held: %v", err)
	}
	locked("with a hold of 3 beside a hold of 1", 2, 4)
	if err := three.Release(ctx); err != nil {
		t.Fatal(err)
	}
	locked("after the hold of 3 was released", 1, 1)
	if err := singles[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A read-write lock takes the advisory lock of its name, as a lock of the
// same name does: a writer and a lock exclude each other, a reader is kept
// out by a lock.
func lockAndRWLock(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	c := distlock.New(newBackend(t, newPool(t, s, 4)))
	defer c.Close()
	name := uniqueKey(t)
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a reader while a lock of the name is held: %v, want ErrNotAcquired", err)
	}
	if _, err := m.TryLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer while a lock of the name is held: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx, name); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a lock while a reader holds the name: %v, want ErrNotAcquired", err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A reader whose session the server ends is told at once, and a writer gets
// in.
func killedReader(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	c := distlock.New(newBackend(t, newPool(t, s, 4)))
	defer c.Close()
	name := uniqueKey(t)
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := terminateHolder(t, admin, pglock.KeyID(name)); n != 1 {
		t.Fatalf("terminated %d sessions, want 1", n)
	}
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a reader whose session ended was not told within 10s")
	}
	w, err := m.Lock(ctx, distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if w.Fence() <= r.Fence() {
		t.Errorf("the writer's fence %d is not above the lost reader's %d", w.Fence(), r.Fence())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Every read-write lock and semaphore call after Close returns ErrClosed.
func rwCallsAfterClose(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	be := newBackend(t, newPool(t, s, 2))
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	req := driver.AcquireRequest{Key: "k", Token: "t", TTL: time.Minute}
	_, _, werr := be.WatchRW(ctx, "k")
	_, _, perr := be.WatchPermits(ctx, "k")
	_, _, _, ierr := be.InspectRW(ctx, "k")
	_, _, sierr := be.InspectPermits(ctx, "k")
	_, aerr := be.AcquireRW(ctx, req, driver.Shared)
	_, perm := be.AcquirePermit(ctx, req, 1)
	_, perms := be.AcquirePermits(ctx, driver.AcquireRequest{Key: "k", Token: "t", TTL: time.Minute, Permits: 2}, 2)
	for what, err := range map[string]error{
		"AcquireRW":            aerr,
		"RenewRW":              be.RenewRW(ctx, "k", "t", time.Second),
		"ReleaseRW":            be.ReleaseRW(ctx, "k", "t"),
		"WithdrawIntent":       be.WithdrawIntent(ctx, "k", "i"),
		"DowngradeRW":          be.DowngradeRW(ctx, "k", "t"),
		"InspectRW":            ierr,
		"WatchRW":              werr,
		"AcquirePermit":        perm,
		"AcquirePermits":       perms,
		"WithdrawPermitIntent": be.WithdrawPermitIntent(ctx, "k", "i"),
		"RenewPermit":          be.RenewPermit(ctx, "k", "t", time.Second),
		"ReleasePermit":        be.ReleasePermit(ctx, "k", "t"),
		"SetPermits":           be.SetPermits(ctx, "k", 2),
		"InspectPermits":       sierr,
		"WatchPermits":         perr,
	} {
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
}
