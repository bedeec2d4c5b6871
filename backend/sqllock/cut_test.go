package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/driver"
)

// TestMariaDBCutAttemptTakesNoKey: an attempt whose context ends while its
// statement runs in the server takes no key afterwards, however late the
// server finishes the statement. On MariaDB and MySQL a waiting client
// polls with acquisition statements. When the context of one ends,
// go-sql-driver/mysql closes the connection and returns, but the server
// neither stops nor undoes the statement: it notices the closed socket only
// when it next reads from it or writes to it, after the statement. Here the
// statement waits for the fence floor's row, which a transaction holds (as
// cleanup does while it raises the floor), so it runs on after the wait
// was cancelled and after the holder released the key.
func TestMariaDBCutAttemptTakesNoKey(t *testing.T) {
	st := mariadb(t)
	admin := st.admin(t)
	ctx := testContext(t, time.Minute)
	key := uniqueKey(t)
	holder := st.client(t)
	l := mustLockT(t, ctx, holder, key)

	// Every acquisition reads the floor's row with a shared lock: with the
	// row locked (once the holder has the key), the waiter's attempt waits
	// inside its statement.
	floor, err := admin.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer floor.Rollback()
	if _, err := floor.ExecContext(ctx, "SELECT n FROM distlock_fence_floor WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}

	attempts := &abandonedReleases{Backend: st.open(t)}
	waiter := distlock.New(attempts)
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
	session := awaitAttempt(t, ctx, admin.DB())
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

	// A client releases, in the background, the token of an attempt that
	// failed without an answer: that release, if any, comes first and
	// finds nothing to release. Then the holder releases and the floor's
	// row is free again: the statement of the cancelled attempt runs to its
	// end. Then the key is free to the client whose wait was cancelled (the
	// conformance suite's ContextCancelWhileWaiting), and to every client.
	attempts.await(t)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := floor.Commit(); err != nil {
		t.Fatal(err)
	}
	awaitStatementEnd(t, ctx, admin.DB(), session)
	l2, err := waiter.TryLock(ctx, key)
	if err != nil {
		var token string
		_ = admin.DB().QueryRowContext(ctx,
			"SELECT token FROM distlock_leases WHERE lock_key = ? AND expires_at > UTC_TIMESTAMP(6)", key).Scan(&token)
		t.Fatalf("key not free after a cut attempt and a release: %v (held by token %q; the holder's was %q)", err, token, l.Token())
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3, err := st.client(t).TryLock(ctx, key)
	if err != nil {
		t.Fatalf("a try by another client: %v", err)
	}
	_ = l3.Release(ctx)
}

// awaitAttempt waits up to 10s for an acquisition's statement to run, and
// returns the id of its session.
func awaitAttempt(t *testing.T, ctx context.Context, db *sql.DB) int64 {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var id int64
		err := db.QueryRowContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST
			WHERE COMMAND = 'Execute' AND INFO LIKE '%INSERT INTO distlock_leases%'`).Scan(&id)
		switch {
		case err == nil:
			return id
		case !errors.Is(err, sql.ErrNoRows):
			t.Fatal(err)
		case time.Now().After(deadline):
			t.Fatal("no acquisition runs after 10s")
		}
		time.Sleep(10 * time.Millisecond) // a poll of the server's state
	}
}

// awaitStatementEnd waits up to 10s until session id runs no statement.
func awaitStatementEnd(t *testing.T, ctx context.Context, db *sql.DB, id int64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		err := db.QueryRowContext(ctx,
			"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND COMMAND <> 'Sleep'", id).Scan(&n)
		switch {
		case err != nil:
			t.Fatal(err)
		case n == 0:
			return
		case time.Now().After(deadline):
			t.Fatalf("session %d still runs a statement after 10s", id)
		}
		time.Sleep(10 * time.Millisecond) // a poll of the server's state
	}
}

// abandonedReleases is a backend that notes the token of every attempt
// that failed without a clear answer, which its client releases in the
// background, and lets a test wait until those releases have ended.
type abandonedReleases struct {
	*sqllock.Backend
	mu       sync.Mutex
	released map[string]chan struct{} // by token; closed when a release of it ended
}

func (a *abandonedReleases) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	g, err := a.Backend.Acquire(ctx, req)
	if err != nil && !errors.Is(err, driver.ErrNotAcquired) {
		a.mu.Lock()
		if a.released == nil {
			a.released = make(map[string]chan struct{})
		}
		if a.released[req.Token] == nil {
			a.released[req.Token] = make(chan struct{})
		}
		a.mu.Unlock()
	}
	return g, err
}

func (a *abandonedReleases) Release(ctx context.Context, key, token string) error {
	err := a.Backend.Release(ctx, key, token)
	a.mu.Lock()
	if ch := a.released[token]; ch != nil {
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	a.mu.Unlock()
	return err
}

// await waits up to 10s for the release of every token noted so far.
func (a *abandonedReleases) await(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	var pending []chan struct{}
	for _, ch := range a.released {
		pending = append(pending, ch)
	}
	a.mu.Unlock()
	timeout := time.After(10 * time.Second)
	for _, ch := range pending {
		select {
		case <-ch:
		case <-timeout:
			t.Fatal("the client did not release the token of a failed attempt within 10s")
		}
	}
}
