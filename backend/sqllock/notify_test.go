package sqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestPostgresNoticeListenerLoss cuts the listening session server-side
// while a waiter waits: the backend listens again on a new session while
// that wait goes on, the waiter gets the key once it is released, and the
// next wait listens too.
func TestPostgresNoticeListenerLoss(t *testing.T) {
	st := postgres(t)
	admin := st.admin(t)
	ctx := testContext(t, time.Minute)
	holder, waiter := st.client(t), st.client(t)
	key := uniqueKey(t)

	// listener returns the pid of the listening session, or 0 if there is
	// none.
	listener := func() int {
		var pid int
		err := admin.DB().QueryRowContext(ctx,
			`SELECT coalesce(max(pid), 0) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`).Scan(&pid)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	// listenerBesides waits for a listening session other than pid's.
	listenerBesides := func(pid int) int {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if now := listener(); now != 0 && now != pid {
				return now
			}
			if time.Now().After(deadline) {
				t.Fatalf("no listening session but %d within 10s", pid)
			}
		}
	}

	for round := range 2 {
		l, err := holder.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l2, err := waiter.Lock(ctx, key, distlock.WithWait(20*time.Second))
			if err == nil {
				err = l2.Release(context.Background())
			}
			got <- err
		}()
		pid := listenerBesides(0) // the waiter's backend listens
		if round == 0 {
			if _, err := admin.DB().ExecContext(ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
				t.Fatal(err)
			}
			listenerBesides(pid) // while the waiter still waits
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: waiter: %v", round, err)
		}
	}
}
