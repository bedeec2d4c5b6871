package sqllock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/locktest"
	"github.com/distlock/distlock/observe"
)

// On PostgreSQL a holder learns at once that its lock was force-released:
// the forced release notifies the token it removed, which the holder's
// backend hears on its listening session, and Done() fires with deleted
// (the key is free), long before the next renewal at a third of the 30 s
// lease.
func TestPostgresForcedReleaseToldAtOnce(t *testing.T) {
	st := postgres(t)
	admin := st.admin(t)
	ctx := testContext(t, time.Minute)
	holder, operator := st.client(t), distlock.New(admin)
	for i := range 3 {
		key := uniqueKey(t)
		l, err := holder.Lock(ctx, key, distlock.WithLease(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			awaitListeners(t, admin, 1)
		}
		start := time.Now()
		if _, err := operator.ForceRelease(ctx, key, "the holder is stuck"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.Done():
			t.Logf("told %v after the forced release", time.Since(start).Round(time.Millisecond))
		case <-time.After(5 * time.Second):
			t.Fatal("the holder was not told within 5 s of the forced release")
		}
		if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) || !strings.Contains(err.Error(), "("+observe.LossDeleted+")") {
			t.Fatalf("Err() = %v, want ErrLockLost (%s)", err, observe.LossDeleted)
		}
		if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) && !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("Release after the loss: %v, want ErrNotHeld or ErrLockLost", err)
		}
	}
}

// awaitListeners waits until n sessions LISTEN, as admin's database sees.
func awaitListeners(t testing.TB, admin *sqllock.Backend, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var got int
		err := admin.DB().QueryRowContext(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d listening sessions after 10 s, want %d", got, n)
		}
	}
}

// BenchmarkPostgresLossNotice is locktest.LossNotice on the lease table:
// from just before the forced release is sent to the holder's Done().
func BenchmarkPostgresLossNotice(b *testing.B) {
	st := postgres(b)
	admin := st.admin(b)
	holder := st.client(b)
	l, err := holder.TryLock(context.Background(), "listen")
	if err != nil {
		b.Fatal(err)
	}
	awaitListeners(b, admin, 1)
	_ = l.Release(context.Background())
	locktest.LossNotice(b, holder, distlock.New(admin), 0)
}

// No session listens for holds whose loss nobody follows: locks taken by
// token for a holder elsewhere (the lock service's), or by a backend built
// WithoutLossNotice. Such a holder learns of a forced release at its next
// renewal, as on MariaDB.
func TestPostgresLossNoticeOff(t *testing.T) {
	st := postgres(t)
	admin := st.admin(t)
	ctx := testContext(t, time.Minute)
	if _, err := st.client(t).AcquireToken(ctx, uniqueKey(t), "token-of-a-remote-holder", distlock.WithLease(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	l, err := st.client(t, sqllock.WithoutLossNotice()).TryLock(ctx, uniqueKey(t), distlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a listening session starts in milliseconds
	var n int
	if err := admin.DB().QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d listening sessions (%v), want none", n, err)
	}
	if _, err := distlock.New(admin).ForceRelease(ctx, l.Key(), "test"); err != nil {
		t.Fatal(err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("told without listening: %v", err)
	}
}
