package mysqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var seq atomic.Int64

// uniqueKey returns a key no other test uses.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("mysqllock/%s/%d-%d", t.Name(), time.Now().UnixNano(), seq.Add(1))
}

func testContext(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// url is the mysql:// URL of s's distlock database, with params.
func url(s *testserver.Server, params string) string {
	return "mysql://root@" + s.Addr() + "/distlock?" + params
}

// openDB opens a handle on s with at most maxConns connections, closed when
// the test ends.
func openDB(t testing.TB, s *testserver.Server, maxConns int) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", testserver.MariaDBDSN(s)+"&interpolateParams=true")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// newBackend returns a backend over db with opts, closed when the test ends.
func newBackend(t testing.TB, db *sql.DB, opts ...mysqllock.Option) *mysqllock.Backend {
	t.Helper()
	b, err := mysqllock.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// holderOf returns the session holding key's named lock, 0 if none.
func holderOf(t testing.TB, admin *sql.DB, key string) uint64 {
	t.Helper()
	var id sql.NullInt64
	if err := admin.QueryRow("SELECT IS_USED_LOCK(?)", mysqllock.LockName(key)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return uint64(id.Int64)
}

// kill ends session id as an operator would.
func kill(t testing.TB, admin *sql.DB, id uint64) {
	t.Helper()
	if _, err := admin.Exec(fmt.Sprintf("KILL %d", id)); err != nil {
		t.Fatalf("KILL %d: %v", id, err)
	}
}

// waiting returns the sessions waiting in GET_LOCK for key's name.
func waiting(t testing.TB, admin *sql.DB, key string) []uint64 {
	t.Helper()
	rows, err := admin.Query(`SELECT ID FROM information_schema.PROCESSLIST
		WHERE COMMAND = 'Query' AND LOCATE(?, COALESCE(INFO, '')) > 0 AND LOCATE('GET_LOCK', INFO) > 0 AND ID <> CONNECTION_ID()`,
		mysqllock.LockName(key))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []uint64
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// stillWaiting returns the sessions that still wait for key after grace.
func stillWaiting(t testing.TB, admin *sql.DB, key string, grace time.Duration) []uint64 {
	t.Helper()
	deadline := time.Now().Add(grace)
	for {
		ids := waiting(t, admin, key)
		if len(ids) == 0 || time.Now().After(deadline) {
			return ids
		}
		time.Sleep(10 * time.Millisecond) // polling the server's process list
	}
}

func TestMariaDB(t *testing.T) {
	s := testserver.MariaDB(t)
	admin := openDB(t, s, 4)

	t.Run("Conformance", func(t *testing.T) {
		openAt := func(t testing.TB, addr string) driver.Backend {
			u := strings.Replace(url(s, "max_open_conns=8&kill_on_force_release=true"), s.Addr(), addr, 1)
			b, err := mysqllock.Open(context.Background(), u)
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
				id := holderOf(t, admin, key)
				if id == 0 {
					t.Fatalf("no session holds %q", key)
				}
				kill(t, admin, id)
			},
			// A waiter's entry in the name's queue is its waiting session.
			DeleteWaiters: func(t testing.TB, key string) {
				for _, id := range waiting(t, admin, key) {
					kill(t, admin, id)
				}
			},
		})
	})
	t.Run("KilledHolderReportedLost", func(t *testing.T) { killedHolder(t, s, admin) })
	t.Run("PoolOfOneLeaksNoLock", func(t *testing.T) { poolOfOne(t, s, admin) })
	t.Run("CancelledWaitLeavesNothing", func(t *testing.T) { cancelledWait(t, s, admin) })
	t.Run("LongAndCaseOnlyKeys", func(t *testing.T) { longAndCaseKeys(t, s, admin) })
	t.Run("PoolExhausted", func(t *testing.T) { poolExhausted(t, s) })
	t.Run("Cleanup", func(t *testing.T) { cleanup(t, s, admin) })
	t.Run("OpenURL", func(t *testing.T) { openURL(t, s) })
	t.Run("ListPageReadsKeyIndex", func(t *testing.T) { listPageReadsKeyIndex(t, s, admin) })
	t.Run("MigrateWidensToken", func(t *testing.T) { widensToken(t, s, admin) }) // last: it alters the table
}

// widensToken: Migrate widens the token column of an earlier schema,
// VARCHAR(64), so that a token of distlock.MaxTokenLen bytes is kept whole.
func widensToken(t *testing.T, s *testserver.Server, admin *sql.DB) {
	ctx := testContext(t, time.Minute)
	for _, q := range []string{
		"DELETE FROM distlock_mysql_locks WHERE CHAR_LENGTH(token) > 64", // rows of the long tokens of the tests before
		"ALTER TABLE distlock_mysql_locks MODIFY token VARCHAR(64) NOT NULL",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	b := newBackend(t, openDB(t, s, 2))
	for range 2 { // Migrate is idempotent
		if err := b.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := distlock.New(b)
	key, long := uniqueKey(t), strings.Repeat("t", distlock.MaxTokenLen)
	if _, err := c.AcquireToken(ctx, key, long); err != nil {
		t.Fatalf("a token of %d bytes after Migrate: %v", len(long), err)
	}
	if err := c.ReleaseToken(ctx, key, long); err != nil {
		t.Fatalf("release with a token of %d bytes after Migrate: %v", len(long), err)
	}
}

// killedHolder: KILL of the holder's session from an admin connection is
// reported as a lost lock, and another client then takes the key with a
// higher fence.
func killedHolder(t *testing.T, s *testserver.Server, admin *sql.DB) {
	ctx := testContext(t, time.Minute)
	a := distlock.New(newBackend(t, openDB(t, s, 2), mysqllock.WithKeepalive(50*time.Millisecond)))
	b := distlock.New(newBackend(t, openDB(t, s, 2)))
	key := uniqueKey(t)
	l, err := a.TryLock(ctx, key, distlock.WithLease(30*time.Second)) // no renewal: the keepalive must notice
	if err != nil {
		t.Fatal(err)
	}
	id := holderOf(t, admin, key)
	if id == 0 {
		t.Fatal("no session holds the lock")
	}
	killed := time.Now()
	kill(t, admin, id)
	select {
	case <-l.Done():
		t.Logf("loss reported %v after KILL (keepalive 50ms)", time.Since(killed))
	case <-time.After(3 * time.Second):
		t.Fatal("KILL of the holder's session not reported within 3s")
	}
	if !errors.Is(l.Err(), distlock.ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", l.Err())
	}
	l2, err := b.Lock(ctx, key, distlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence after the kill %d, not above the killed holder's %d", l2.Fence(), l.Fence())
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("release of the killed hold: got %v, want ErrLockLost", err)
	}
}

// poolOfOne: with one connection in the handle, a released lock does not
// stay on the connection that the next user of the handle gets.
func poolOfOne(t *testing.T, s *testserver.Server, admin *sql.DB) {
	ctx := testContext(t, time.Minute)
	db := openDB(t, s, 1)
	c := distlock.New(newBackend(t, db))
	other := distlock.New(newBackend(t, openDB(t, s, 1)))
	key := uniqueKey(t)
	for i := range 3 {
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		// While held, the handle's only connection is pinned: the next user waits.
		sctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		if _, err := db.Conn(sctx); err == nil {
			t.Fatalf("round %d: the handle gave out the connection that holds the lock", i)
		}
		cancel()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var mine, holder sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT CONNECTION_ID(), IS_USED_LOCK(?)", mysqllock.LockName(key)).Scan(&mine, &holder); err != nil {
			t.Fatal(err)
		}
		if holder.Valid {
			t.Fatalf("round %d: session %d still holds the lock after release (next user is %d)", i, holder.Int64, mine.Int64)
		}
		l2, err := other.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("round %d: another client cannot take the released key: %v", i, err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if id := holderOf(t, admin, key); id != 0 {
		t.Fatalf("session %d holds the key after every release", id)
	}
}

// cancelledWait: a wait ended by its context leaves neither a lock nor a
// waiting statement in the server.
func cancelledWait(t *testing.T, s *testserver.Server, admin *sql.DB) {
	ctx := testContext(t, time.Minute)
	a := distlock.New(newBackend(t, openDB(t, s, 2)))
	b := distlock.New(newBackend(t, openDB(t, s, 2)))
	for _, how := range []string{"cancel", "deadline"} {
		key := uniqueKey(t)
		l, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		errc := make(chan error, 1)
		go func() {
			opt := distlock.WithWait(time.Minute)
			if how == "deadline" {
				// Long enough for a loaded machine to connect and show the
				// waiting statement before the wait ends.
				opt = distlock.WithWait(2 * time.Second)
			}
			_, err := b.Lock(wctx, key, opt)
			errc <- err
		}()
		deadline := time.Now().Add(5 * time.Second)
		for len(waiting(t, admin, key)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no waiting statement seen within 5s", how)
			}
			time.Sleep(5 * time.Millisecond) // polling the server's processlist
		}
		if testing.Verbose() {
			rows, _ := admin.Query("SELECT ID, COMMAND, COALESCE(STATE,''), COALESCE(INFO,'') FROM information_schema.PROCESSLIST")
			for rows.Next() {
				var id, c, st, info string
				_ = rows.Scan(&id, &c, &st, &info)
				t.Log(id, c, st, info)
			}
			rows.Close()
		}
		if how == "cancel" {
			cancel()
		}
		select {
		case err := <-errc:
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("%s: got %v, want ErrNotAcquired", how, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the wait did not end within 5s", how)
		}
		cancel()
		// The server answers a killed statement before it clears the
		// statement from its process list, so a session may still show
		// there for a moment; one that still waits after a second was
		// not killed and would wait out its whole GET_LOCK.
		if ids := stillWaiting(t, admin, key, time.Second); len(ids) != 0 {
			t.Fatalf("%s: sessions %v still wait for the key 1s after the wait ended", how, ids)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if id := holderOf(t, admin, key); id != 0 {
			t.Fatalf("%s: session %d holds the key after the holder released it", how, id)
		}
	}
}

// longAndCaseKeys: keys longer than a lock name, and keys that differ only
// in case, are locks of their own.
func longAndCaseKeys(t *testing.T, s *testserver.Server, admin *sql.DB) {
	ctx := testContext(t, time.Minute)
	a := distlock.New(newBackend(t, openDB(t, s, 12)))
	base := uniqueKey(t)
	long := base + "/" + strings.Repeat("x", 200)
	keys := []string{
		long + "/a", long + "/b", // differ after the 64th character
		strings.ToLower(base) + "/k", strings.ToUpper(base) + "/k", base + "/k", // differ only in case
		strings.Repeat("a", 61), strings.Repeat("a", 62), // the longest plain name, the shortest hashed
		strings.Repeat("é", 256), // 512 bytes
	}
	names := map[string]string{}
	for _, k := range keys {
		n := mysqllock.LockName(k)
		if len(n) > mysqllock.MaxNameLen {
			t.Fatalf("name of %q is %d characters, over %d", k, len(n), mysqllock.MaxNameLen)
		}
		if other, ok := names[strings.ToLower(n)]; ok {
			t.Fatalf("keys %q and %q share the lock name %q", other, k, n)
		}
		names[strings.ToLower(n)] = k
	}
	var held []*distlock.Lock
	for _, k := range keys {
		l, err := a.TryLock(ctx, k, distlock.WithOwner(fmt.Sprintf("owner-%d", len(held))))
		if err != nil {
			t.Fatalf("lock %q while the others are held: %v", k, err)
		}
		held = append(held, l)
	}
	for _, l := range held {
		info, err := a.Inspect(ctx, l.Key())
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Key != l.Key() || info.Fence != l.Fence() {
			t.Fatalf("inspect %q: %+v, want held with fence %d", l.Key(), info, l.Fence())
		}
	}
	list, err := a.List(ctx, long)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != long+"/a" || list[1].Key != long+"/b" {
		t.Fatalf("list of the long prefix: %+v", list)
	}
	for _, l := range held {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if id := holderOf(t, admin, l.Key()); id != 0 {
			t.Fatalf("%q still held by session %d", l.Key(), id)
		}
	}
}

// poolExhausted: a handle whose connections are all pinned by held locks
// fails an attempt within WithPoolWait with ErrPoolExhausted.
func poolExhausted(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	c := distlock.New(newBackend(t, openDB(t, s, 1), mysqllock.WithPoolWait(100*time.Millisecond)))
	l, err := c.TryLock(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	start := time.Now()
	_, err = c.TryLock(ctx, uniqueKey(t))
	if !errors.Is(err, mysqllock.ErrPoolExhausted) {
		t.Fatalf("got %v, want ErrPoolExhausted", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("pool exhaustion reported after %v", took)
	}
}

// cleanup: a stale row is deleted, and the key's next fence is still higher.
func cleanup(t *testing.T, s *testserver.Server, admin *sql.DB) {
	ctx := testContext(t, time.Minute)
	b := newBackend(t, openDB(t, s, 2), mysqllock.WithCleanupInterval(0))
	c := distlock.New(b)
	key := uniqueKey(t)
	l, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Age the row past the retention, as time would.
	if _, err := admin.ExecContext(ctx, "UPDATE distlock_mysql_locks SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 11 MINUTE WHERE lock_key = ?", key); err != nil {
		t.Fatal(err)
	}
	n, err := b.Cleanup(ctx)
	if err != nil || n < 1 {
		t.Fatalf("cleanup deleted %d rows: %v", n, err)
	}
	var rows int
	if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM distlock_mysql_locks WHERE lock_key = ?", key).Scan(&rows); err != nil || rows != 0 {
		t.Fatalf("row of %q after cleanup: %d %v", key, rows, err)
	}
	l2, err := c.TryLock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence after cleanup %d, not above %d", l2.Fence(), l.Fence())
	}
}

// openURL: Open takes mysqllock's parameters from the URL and rejects bad
// ones with ErrInvalidOption before connecting; an unreachable server fails
// promptly, naming the dial error.
func openURL(t *testing.T, s *testserver.Server) {
	ctx := testContext(t, time.Minute)
	c, err := distlock.Open(ctx, url(s, "request_timeout=2s&keepalive=100ms&pool_wait=500ms&max_open_conns=4"))
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
	for _, bad := range []string{
		url(s, "request_timeout=soon"), url(s, "keepalive=1ms"), url(s, "pool_wait=-1s"),
		url(s, "kill_on_force_release=maybe"), url(s, "max_open_conns=-1"), url(s, "timeout=x"),
		"mysql:///distlock", "postgres://" + s.Addr() + "/x",
	} {
		if _, err := mysqllock.Open(ctx, bad); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Open(%q): got %v, want ErrInvalidOption", bad, err)
		}
	}
	for _, opt := range []mysqllock.Option{
		mysqllock.WithPoolWait(0), mysqllock.WithKeepalive(time.Millisecond), mysqllock.WithRequestTimeout(-1),
		mysqllock.WithCleanupInterval(-1), mysqllock.WithCleanupBatch(0), mysqllock.WithRetention(time.Second),
	} {
		if _, err := mysqllock.New(openDB(t, s, 1), opt); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("New with a bad option: got %v, want ErrInvalidOption", err)
		}
	}
	if _, err := mysqllock.New(nil); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("New(nil): got %v, want ErrInvalidOption", err)
	}
	start := time.Now()
	_, err = mysqllock.Open(ctx, "mysql://root@127.0.0.1:1/distlock")
	var ne interface{ Timeout() bool }
	if err == nil || !strings.Contains(err.Error(), "connect") && !errors.As(err, &ne) {
		t.Fatalf("Open of a closed port: %v, want the dial error", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("Open of a closed port failed after %v", took)
	}
	_ = mysql.ErrInvalidConn
}
