package sqllock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var seq atomic.Int64

func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("sqllock/%s/%d-%d", t.Name(), time.Now().UnixNano(), seq.Add(1))
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// store is one running database and how to reach it.
type store struct {
	s       *testserver.Server
	driver  string
	dsn     string
	dialect *sqllock.Dialect
}

// notifyLatency bounds a handoff in the conformance suite: PostgreSQL wakes
// waiters with a notice; MariaDB has none, so its waiters poll and the bound
// allows the client's backoff cap.
func (st store) notifyLatency() time.Duration {
	if st.dialect == sqllock.Postgres {
		return 50 * time.Millisecond
	}
	return 150 * time.Millisecond
}

// open returns a backend with a database handle of its own, closed by the
// backend's Close.
func (st store) open(t testing.TB, opts ...sqllock.Option) *sqllock.Backend {
	t.Helper()
	return st.openAt(t, st.s.Addr(), opts...)
}

// openAt is open through addr (host:port) instead of the server's address.
func (st store) openAt(t testing.TB, addr string, opts ...sqllock.Option) *sqllock.Backend {
	t.Helper()
	b, err := sqllock.OpenDSN(context.Background(), st.driver, st.dsnAt(addr), st.dialect, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dsnAt is the store's DSN with addr in place of the server's address.
func (st store) dsnAt(addr string) string {
	return strings.Replace(st.dsn, st.s.Addr(), addr, 1)
}

// sql returns q with ? placeholders in the store's own style.
func (st store) sql(q string) string {
	if st.dialect != sqllock.Postgres {
		return q
	}
	for i := 1; strings.Contains(q, "?"); i++ {
		q = strings.Replace(q, "?", "$"+strconv.Itoa(i), 1)
	}
	return q
}

// admin returns a backend of its own on the store, with the tables made,
// closed when the test ends.
func (st store) admin(t testing.TB) *sqllock.Backend {
	t.Helper()
	admin := st.open(t)
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return admin
}

// client returns a client closed when the test ends.
func (st store) client(t testing.TB, opts ...sqllock.Option) *distlock.Client {
	c := distlock.New(st.open(t, opts...))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func postgres(t testing.TB) store {
	s := testserver.Postgres(t)
	return store{s: s, driver: "pgx", dsn: testserver.PostgresDSN(s), dialect: sqllock.Postgres}
}

func mariadb(t testing.TB) store {
	s := testserver.MariaDB(t)
	return store{s: s, driver: "mysql", dsn: testserver.MariaDBDSN(s), dialect: sqllock.MariaDB}
}

func TestPostgres(t *testing.T) { runStore(t, postgres(t)) }

func TestMariaDB(t *testing.T) {
	st := mariadb(t)
	runStore(t, st)
	t.Run("OpenURL", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		c, err := distlock.Open(ctx, "mysql+table://root@"+st.s.Addr()+"/distlock?timeout=5s")
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
	})
	t.Run("MissingFenceFloor", func(t *testing.T) { missingFenceFloor(t, st) })
}

// missingFenceFloor: a table whose fence floor row is gone (a migration cut
// short, a restore, a server that lost its last commits) refuses a lock
// with an error that says to run Migrate, not as a held key, which would
// leave waiters waiting for a release that cannot come; Migrate puts the row
// back above every fence given.
func missingFenceFloor(t *testing.T, st store) {
	ctx := testContext(t, time.Minute)
	c := st.client(t)
	b := st.open(t)
	defer b.Close()
	before := mustTryLock(t, ctx, c, uniqueKey(t))
	if _, err := b.DB().ExecContext(ctx, "DELETE FROM distlock_fence_floor"); err != nil {
		t.Fatal(err)
	}
	_, err := c.TryLock(ctx, uniqueKey(t))
	if err == nil || errors.Is(err, distlock.ErrNotAcquired) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("a try without the fence floor: %v; want an error that says to run Migrate", err)
	}
	// A wait retries store errors until it ends, then names the last one.
	// The wait is long enough for a first attempt on a loaded machine to
	// answer; one cut short by the wait has no store error to name.
	if _, err := c.Lock(ctx, uniqueKey(t), distlock.WithWait(time.Second)); err == nil || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("a wait without the fence floor: %v; want an error that says to run Migrate", err)
	}
	if err := b.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if l := mustTryLock(t, ctx, c, uniqueKey(t)); l.Fence() <= before.Fence() {
		t.Fatalf("fence %d after Migrate restored the floor, not above %d", l.Fence(), before.Fence())
	}
}

func mustTryLock(t *testing.T, ctx context.Context, c *distlock.Client, key string) *distlock.Lock {
	t.Helper()
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.WithoutCancel(ctx)) })
	return l
}

func runStore(t *testing.T, st store) {
	admin := st.open(t, sqllock.WithRetention(time.Millisecond), sqllock.WithCleanupBatch(2))
	t.Cleanup(func() { _ = admin.Close() })
	ctx := testContext(t, time.Minute)
	for range 2 { // Migrate is idempotent
		if err := admin.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("Conformance", func(t *testing.T) {
		locktest.Run(t, locktest.Harness{
			NewBackend:    func(t testing.TB) driver.Backend { return st.open(t) },
			DeleteKey:     func(t testing.TB, key string) { deleteRow(t, st, key) },
			NotifyLatency: st.notifyLatency(),
			StoreAddr:     st.s.Addr(),
			NewBackendAt:  func(t testing.TB, addr string) driver.Backend { return st.openAt(t, addr) },
		})
	})
	t.Run("CleanupKeepsFencesIncreasing", func(t *testing.T) { cleanup(t, st, admin) })
	t.Run("CleanupLoopRemovesRows", func(t *testing.T) { cleanupLoop(t, st) })
	t.Run("ForceRelease", func(t *testing.T) { forceRelease(t, st, admin) })
	t.Run("ClosedBackend", func(t *testing.T) { closedBackend(t, st) })
	t.Run("Unreachable", func(t *testing.T) { unreachable(t, st) })
	t.Run("RequestTimeout", func(t *testing.T) { requestTimeout(t, st) })
	t.Run("Restart", func(t *testing.T) { restart(t, st) })
	t.Run("SmallPool", func(t *testing.T) { smallPool(t, st) })
	t.Run("ListPageInByteOrder", func(t *testing.T) { listPageInByteOrder(t, st) })
}

// deleteRow removes key's row behind its holder's back, as an operator
// would: on MariaDB raising the fence floor first, as the docs ask.
func deleteRow(t testing.TB, st store, key string) {
	t.Helper()
	b := st.open(t)
	defer b.Close()
	ctx := context.Background()
	if st.dialect != sqllock.Postgres {
		if _, err := b.DB().ExecContext(ctx, `UPDATE distlock_fence_floor
			SET n = GREATEST(n, COALESCE((SELECT fence FROM distlock_leases WHERE lock_key = ?), 0)) WHERE id = 1`, key); err != nil {
			t.Fatal(err)
		}
	}
	n, err := b.DB().ExecContext(ctx, st.sql("DELETE FROM distlock_leases WHERE lock_key = ?"), key)
	if err != nil {
		t.Fatal(err)
	}
	if rows, _ := n.RowsAffected(); rows != 1 {
		t.Fatalf("deleted %d rows of %q, want 1", rows, key)
	}
}

func cleanup(t *testing.T, st store, admin *sqllock.Backend) {
	ctx := testContext(t, time.Minute)
	c := st.client(t)
	keys := []string{uniqueKey(t), uniqueKey(t), uniqueKey(t)}
	var top uint64
	for _, k := range keys { // holders that vanish: their rows stay, expired
		l, err := c.TryLock(ctx, k, distlock.WithLease(250*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		top = max(top, l.Fence())
		<-l.Done()
	}
	held, err := c.TryLock(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	time.Sleep(100 * time.Millisecond) // every lease ended, past the 1ms retention
	if info, err := c.Inspect(ctx, keys[2]); err != nil || info.Held || info.Fence != top {
		t.Fatalf("Inspect of an expired lease: %+v, %v; want free with the last fence %d", info, err, top)
	}
	var total int64
	for range 1000 { // earlier tests left expired rows too
		n, err := admin.Cleanup(ctx)
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
		t.Fatalf("cleanup deleted %d rows, want at least the %d expired ones", total, len(keys))
	}
	info, err := c.Inspect(ctx, keys[0])
	if err != nil || info.Held || info.Fence != 0 {
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

// restart restarts the database under a held lease: the lease is in a table,
// so it outlives the restart, expires on the database's clock, and the next
// holder gets a higher fence.
func restart(t *testing.T, st store) {
	ctx := testContext(t, 2*time.Minute)
	a, b := st.client(t), st.client(t)
	key := uniqueKey(t)
	l, err := a.TryLock(ctx, key, distlock.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	st.s.Restart()
	info, err := retry(ctx, func() (distlock.Info, error) { return b.Inspect(ctx, key) })
	if err != nil {
		t.Fatal(err)
	}
	if info.Fence != l.Fence() {
		t.Fatalf("after the restart the row has fence %d, want the holder's %d", info.Fence, l.Fence())
	}
	l2, err := retry(ctx, func() (*distlock.Lock, error) { return b.Lock(ctx, key, distlock.WithWait(10*time.Second)) })
	if err != nil {
		t.Fatalf("no takeover after the lease expired across a restart: %v", err)
	}
	defer l2.Release(ctx)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence %d after the restart is not above %d", l2.Fence(), l.Fence())
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) && !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("stale holder's release: %v", err)
	}
}

// retry calls f until it succeeds, at most 50 times 100ms apart: connections
// that died with the server fail once each.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	var (
		v   T
		err error
	)
	for range 50 {
		if v, err = f(); err == nil || ctx.Err() != nil {
			return v, err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return v, err
}

// TestMySQLSchemeIsNotTheLeaseTable: the lease table registers
// mysql+table://; mysql:// belongs to the named-lock backend (mysqllock),
// which this package does not import.
func TestMySQLSchemeIsNotTheLeaseTable(t *testing.T) {
	_, err := distlock.Open(context.Background(), "mysql://root@127.0.0.1:1/distlock")
	if err == nil || !strings.Contains(err.Error(), "unknown scheme") {
		t.Fatalf("mysql:// opened through sqllock alone: %v, want an unknown scheme", err)
	}
	if !slices.Contains(distlock.Schemes(), "mysql+table") {
		t.Fatalf("schemes %v lack mysql+table", distlock.Schemes())
	}
}
