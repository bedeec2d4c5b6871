package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var seq atomic.Int64

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("pglock/%s/%d-%d", t.Name(), time.Now().UnixNano(), seq.Add(1))
}

// newPool returns a pool on s closed when the test ends.
func newPool(t testing.TB, s *testserver.Server, maxConns int) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testserver.PostgresDSN(s))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// newBackend returns a backend over pool with opts.
func newBackend(t testing.TB, pool *pgxpool.Pool, opts ...pglock.Option) *pglock.Backend {
	t.Helper()
	b, err := pglock.New(pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// terminateHolder ends the session holding id's advisory lock, as an operator
// or a failover would, and reports how many sessions it ended.
func terminateHolder(t testing.TB, admin *pgxpool.Pool, id int64) int {
	t.Helper()
	var n int
	err := admin.QueryRow(context.Background(), `
		SELECT count(pg_terminate_backend(pid)) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		  AND classid = (($1::bigint >> 32) & 4294967295)::oid AND objid = ($1::bigint & 4294967295)::oid`, id).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPostgres(t *testing.T) {
	s := testserver.Postgres(t)
	admin := newPool(t, s, 4)

	t.Run("Conformance", func(t *testing.T) {
		openAt := func(t testing.TB, addr string) driver.Backend {
			dsn := strings.Replace(testserver.PostgresDSN(s), s.Addr(), addr, 1)
			b, err := pglock.Open(context.Background(), dsn+"&pool_max_conns=8&terminate_on_force_release=true")
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		locktest.Run(t, locktest.Harness{
			NewBackend:   func(t testing.TB) driver.Backend { return openAt(t, s.Addr()) },
			StoreAddr:    s.Addr(),
			NewBackendAt: openAt,
			DeleteKey: func(t testing.TB, key string) {
				if n := terminateHolder(t, admin, pglock.KeyID(key)); n != 1 {
					t.Fatalf("terminated %d sessions holding %q, want 1", n, key)
				}
			},
			// A waiter's entry in the lock's queue is its waiting session.
			DeleteWaiters: func(t testing.TB, key string) { terminateWaiters(t, admin, pglock.KeyID(key)) },
		})
	})
	t.Run("KilledSessionReportedLost", func(t *testing.T) { killedSession(t, s, admin) })
	t.Run("PoolExhausted", func(t *testing.T) { poolExhausted(t, s) })
	t.Run("NoLockReturnsToPool", func(t *testing.T) { noLockReturnsToPool(t, s) })
	t.Run("XactLock", func(t *testing.T) { xactLock(t, s) })
	t.Run("Namespace", func(t *testing.T) { namespace(t, s, admin) })
	t.Run("CleanupKeepsFencesIncreasing", func(t *testing.T) { cleanup(t, s) })
	t.Run("WithoutHolderRows", func(t *testing.T) { withoutRows(t, s, admin) })
	t.Run("DeferredHolderRows", func(t *testing.T) { deferredRows(t, s) })
	t.Run("KeepaliveLoop", func(t *testing.T) { keepaliveLoop(t, s) })
	t.Run("OpenURL", func(t *testing.T) { openURL(t, s) })
	t.Run("ListPageInByteOrder", func(t *testing.T) { listPageInByteOrder(t, s, admin) })
	t.Run("KeyIndexWaitsForNoOne", func(t *testing.T) { keyIndexWaitsForNoOne(t, s, admin) })
}

func openURL(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	c, err := distlock.Open(ctx, testserver.PostgresDSN(s))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func withoutRows(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	a := distlock.New(newBackend(t, newPool(t, s, 2), pglock.WithoutHolderRows()))
	b := distlock.New(newBackend(t, newPool(t, s, 2), pglock.WithoutHolderRows()))
	defer a.Close()
	defer b.Close()
	key := uniqueKey(t)
	l, err := a.TryLock(ctx, key, distlock.WithLease(300*time.Millisecond), distlock.WithWatchdog(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held key: %v, want ErrNotAcquired", err)
	}
	time.Sleep(time.Second) // renewals only confirm the session
	if info, err := b.Inspect(ctx, key); err != nil || !info.Held || info.Fence != 0 {
		t.Fatalf("Inspect = %+v, %v; want held, without a fence", info, err)
	}
	type result struct {
		l   *distlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l2, err := b.Lock(ctx, key, distlock.WithWait(10*time.Second)) // the native wait
		got <- result{l2, err}
	}()
	waitFor(t, 10*time.Second, "the waiter in the lock's queue", func() bool { return waitersOf(t, admin, pglock.KeyID(key)) == 1 })
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the released key within 10s")
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.l.Fence() <= l.Fence() {
		t.Fatalf("fence %d not above %d", r.l.Fence(), l.Fence())
	}
	_ = r.l.Release(ctx)
}

// deferredRows checks WithDeferredHolderRows: the holder's own backend
// describes a hold from its grant; other processes see it held at once and
// described once its row is written, after the watch delay; a hold released
// sooner writes nothing, so a free key's fence is unknown.
func deferredRows(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	a := distlock.New(newBackend(t, newPool(t, s, 2), pglock.WithDeferredHolderRows(), pglock.WithWatchDelay(50*time.Millisecond)))
	b := distlock.New(newBackend(t, newPool(t, s, 2), pglock.WithDeferredHolderRows()))
	defer a.Close()
	defer b.Close()
	prefix := uniqueKey(t)
	key := prefix + "/held"
	l, err := a.TryLock(ctx, key, distlock.WithOwner("svc-a"), distlock.WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if info, err := a.Inspect(ctx, key); err != nil || !info.Held || info.Fence != l.Fence() || info.Meta.Owner != "svc-a" || info.TTL <= 0 {
		t.Fatalf("the holder's Inspect at once = %+v, %v; want its hold described", info, err)
	}
	if infos, err := a.List(ctx, prefix+"/"); err != nil || len(infos) != 1 || infos[0].Fence != l.Fence() {
		t.Fatalf("the holder's List at once = %+v, %v; want its hold", infos, err)
	}
	if info, err := b.Inspect(ctx, key); err != nil || !info.Held {
		t.Fatalf("another's Inspect at once = %+v, %v; want held", info, err)
	}
	waitFor(t, 10*time.Second, "another process sees the hold described", func() bool {
		info, err := b.Inspect(ctx, key)
		return err == nil && info.Held && info.Fence == l.Fence() && info.Meta.Owner == "svc-a" && info.TTL > 0
	})
	if infos, err := b.List(ctx, prefix+"/"); err != nil || len(infos) != 1 || infos[0].Fence != l.Fence() || infos[0].Meta.Owner != "svc-a" {
		t.Fatalf("another's List = %+v, %v; want the hold", infos, err)
	}

	short := prefix + "/short"
	l2, err := a.TryLock(ctx, short)
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if info, err := b.Inspect(ctx, short); err != nil || info.Held || info.Fence != 0 {
		t.Fatalf("Inspect of a key released at once = %+v, %v; want free, fence unknown", info, err)
	}
}

// cleanup checks that released keys' rows go in bounded batches, held ones
// stay, and fences keep increasing once a row is gone.
func cleanup(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	be := newBackend(t, newPool(t, s, 4), pglock.WithCleanupInterval(0), pglock.WithRetention(time.Millisecond), pglock.WithCleanupBatch(2))
	c := distlock.New(be)
	defer c.Close()
	keys := []string{uniqueKey(t), uniqueKey(t), uniqueKey(t)}
	var top uint64
	for _, k := range keys {
		l, err := c.TryLock(ctx, k, distlock.WithLease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		top = max(top, l.Fence())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := c.TryLock(ctx, uniqueKey(t), distlock.WithLease(time.Second), distlock.WithWatchdog(true))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	if info, err := c.Inspect(ctx, keys[2]); err != nil || info.Held || info.Fence != top {
		t.Fatalf("Inspect of a released key: %+v, %v; want free with the last fence %d", info, err, top)
	}
	// Past every lease and the 1ms retention; the held key's watchdog renews
	// it every third of a second, which leaves a busy machine slack.
	time.Sleep(1300 * time.Millisecond)
	var total int64
	for range 1000 { // earlier tests left rows too
		n, err := be.Cleanup(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n > 2 {
			t.Fatalf("one cleanup deleted %d rows, over its batch of 2", n)
		}
		if total += n; n == 0 {
			break
		}
	}
	if total < int64(len(keys)) {
		t.Fatalf("cleanup deleted %d rows, want at least the %d released ones", total, len(keys))
	}
	if info, err := c.Inspect(ctx, keys[0]); err != nil || info.Held || info.Fence != 0 {
		t.Fatalf("Inspect of a deleted row: %+v, %v; want free and unknown", info, err)
	}
	if info, err := c.Inspect(ctx, held.Key()); err != nil || !info.Held || info.Fence != held.Fence() {
		t.Fatalf("cleanup touched a held row: %+v, %v", info, err)
	}
	l, err := c.TryLock(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if l.Fence() <= top {
		t.Fatalf("fence %d after the row was deleted is not above %d", l.Fence(), top)
	}
}

func killedSession(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	a := distlock.New(newBackend(t, newPool(t, s, 2), pglock.WithKeepalive(100*time.Millisecond)))
	b := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer a.Close()
	defer b.Close()
	key := uniqueKey(t)
	l, err := a.TryLock(ctx, key) // default lease: 30s, renewed every 10s
	if err != nil {
		t.Fatal(err)
	}
	if n := terminateHolder(t, admin, pglock.KeyID(key)); n != 1 {
		t.Fatalf("terminated %d sessions, want 1", n)
	}
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a killed session was not reported lost within 5s; the keepalive runs every 100ms")
	}
	if !errors.Is(l.Err(), distlock.ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", l.Err())
	}
	l2, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("another client could not take the key after the holder's session died: %v", err)
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the takeover is not above %d", l2.Fence(), l.Fence())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("release of the lost lock: %v, want ErrLockLost", err)
	}
}

func poolExhausted(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	c := distlock.New(newBackend(t, newPool(t, s, 1), pglock.WithPoolWait(100*time.Millisecond)))
	defer c.Close()
	held, err := c.TryLock(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	other := uniqueKey(t)
	start := time.Now()
	_, err = c.TryLock(ctx, other)
	if !errors.Is(err, pglock.ErrPoolExhausted) {
		t.Fatalf("TryLock with every connection pinned: %v, want ErrPoolExhausted", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("TryLock on an exhausted pool took %v", took)
	}
	start = time.Now()
	_, err = c.Lock(ctx, other, distlock.WithWait(300*time.Millisecond))
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("Lock with every connection pinned: %v, want ErrNotAcquired", err)
	}
	if took := time.Since(start); took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("a wait of 300ms for a connection returned after %v", took)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, other)
	if err != nil {
		t.Fatalf("the released connection did not serve the next lock: %v", err)
	}
	_ = l.Release(ctx)
}

// noLockReturnsToPool checks that whatever way a hold ends, the connection
// that goes back to the pool holds no advisory lock.
func noLockReturnsToPool(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	pool := newPool(t, s, 1)
	c := distlock.New(newBackend(t, pool))
	defer c.Close()
	countLocks := func(what string) {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("after %s the pooled connection holds %d advisory locks", what, n)
		}
	}
	key := uniqueKey(t)
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	countLocks("a release")

	l, err = c.TryLock(ctx, key, distlock.WithLease(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a lease of 100ms did not end within 10s")
	}
	// The pool has one connection: countLocks gets it only once the backend
	// unlocked the key on its keepalive round and gave the connection back.
	countLocks("an expiry")

	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	other := distlock.New(newBackend(t, newPool(t, s, 1)))
	defer other.Close()
	blocker, err := other.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(wctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("cancelled wait: %v", err)
	}
	_ = blocker.Release(ctx)
	countLocks("a cancelled wait")
}

func xactLock(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	pool := newPool(t, s, 4)
	be := newBackend(t, pool)
	c := distlock.New(be)
	defer c.Close()
	key := uniqueKey(t)
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	if err := be.XactLock(ctx, tx1, key); err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx2 pgx.Tx) error { return be.TryXactLock(ctx, tx2, key) })
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryXactLock on a key locked by another transaction: %v, want ErrNotAcquired", err)
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("session lock on a key locked by a transaction: %v, want ErrNotAcquired", err)
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("commit did not release the transaction lock: %v", err)
	}
	_ = l.Release(ctx)
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return be.XactLock(ctx, tx, "bad\x00key") })
	if !errors.Is(err, distlock.ErrInvalidKey) {
		t.Fatalf("XactLock with an invalid key: %v, want ErrInvalidKey", err)
	}
}

func namespace(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) {
	ctx := testContext(t, time.Minute)
	const ns = 7
	c := distlock.New(newBackend(t, newPool(t, s, 2), pglock.WithNamespace(ns)))
	plain := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer c.Close()
	defer plain.Close()
	key := uniqueKey(t)
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var classid int64
	if err := admin.QueryRow(ctx, `SELECT classid::bigint FROM pg_locks WHERE locktype = 'advisory' AND objid = ($1::bigint & 4294967295)::oid`,
		pglock.NamespacedKeyID(ns, key)).Scan(&classid); err != nil {
		t.Fatal(err)
	}
	if classid != ns {
		t.Fatalf("pg_locks classid = %d, want the namespace %d", classid, ns)
	}
	l2, err := plain.TryLock(ctx, key) // another id space
	if err != nil {
		t.Fatalf("a namespaced lock blocked the plain one: %v", err)
	}
	_ = l2.Release(ctx)
	_ = l.Release(ctx)
}

func TestKeyIDIsStable(t *testing.T) {
	// Computed independently (sha256sum, an FNV-1a reference); a change here
	// re-maps every deployed key of its scheme.
	for _, c := range []struct {
		name      string
		got, want uint64
	}{
		{"KeyID", uint64(pglock.KeyID("orders/42")), 0xc4dd165f06c35f87},
		{"NamespacedKeyID(3)", uint64(pglock.NamespacedKeyID(3, "orders/42")), 0x00000003c4dd165f},
		{"NamespacedKeyID(-1)", uint64(pglock.NamespacedKeyID(-1, "orders/42")), 0xffffffffc4dd165f},
		{"LegacyKeyID", uint64(pglock.LegacyKeyID("orders/42")), 0xa62399f64f6961df},
		{"LegacyNamespacedKeyID(3)", uint64(pglock.LegacyNamespacedKeyID(3, "orders/42")), 0x00000003d7e52b5f},
	} {
		if c.got != c.want {
			t.Errorf("%s of %q = %#x, want %#x", c.name, "orders/42", c.got, c.want)
		}
	}
}

// keepaliveLoop checks that the one keepalive loop of a backend ends each
// lease on time whatever the others are, keeps a longer one, and starts
// again after the backend held nothing.
func keepaliveLoop(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	a := newBackend(t, newPool(t, s, 4), pglock.WithCleanupInterval(0)) // keepalive 5s: the 10s lease is due after 3.3s, the others sooner
	b := newBackend(t, newPool(t, s, 4), pglock.WithCleanupInterval(0))
	defer a.Close()
	defer b.Close()
	token := func() string { return fmt.Sprintf("%032d", seq.Add(1)) }
	acquire := func(be *pglock.Backend, key, token string, ttl time.Duration) (driver.Grant, error) {
		return be.Acquire(ctx, driver.AcquireRequest{Key: key, Token: token, TTL: ttl})
	}
	// expires waits until b can take key, which a took with ttl, and
	// releases it again.
	expires := func(key string, ttl time.Duration, g driver.Grant, taken time.Time) {
		t.Helper()
		for {
			tok := token()
			_, err := acquire(b, key, tok, time.Minute)
			if err == nil {
				if err := b.Release(ctx, key, tok); err != nil {
					t.Fatal(err)
				}
				break
			}
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatal(err)
			}
			// The round is due a third of the lease apart: the lease ends
			// with a delay that is far from the 3.3s of the longest one.
			if time.Since(taken) > ttl+2*time.Second {
				t.Fatalf("a lease of %v did not end within %v", ttl, time.Since(taken))
			}
			time.Sleep(10 * time.Millisecond)
		}
		select {
		case <-g.Lost.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("the lease of %v ended without Lost", ttl)
		}
	}
	long, short, shorter := uniqueKey(t), uniqueKey(t), uniqueKey(t)
	longToken := token()
	gl, err := acquire(a, long, longToken, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	taken := time.Now()
	gs, err := acquire(a, short, token(), 400*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	gss, err := acquire(a, shorter, token(), 200*time.Millisecond) // due before the others
	if err != nil {
		t.Fatal(err)
	}
	expires(shorter, 200*time.Millisecond, gss, taken)
	expires(short, 400*time.Millisecond, gs, taken)
	if _, err := acquire(b, long, token(), time.Minute); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("the 10s lease ended early: %v", err)
	}
	select {
	case <-gl.Lost.Done():
		t.Fatal("the 10s lease was reported lost")
	default:
	}
	if err := a.Release(ctx, long, longToken); err != nil {
		t.Fatal(err)
	}
	// a holds nothing: its loop stops within a second. A new hold starts it
	// again.
	time.Sleep(1500 * time.Millisecond)
	again := uniqueKey(t)
	taken = time.Now()
	g, err := acquire(a, again, token(), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	expires(again, 200*time.Millisecond, g, taken)
}
