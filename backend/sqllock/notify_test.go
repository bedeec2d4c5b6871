package sqllock_test

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestPostgresNoticeListenerLoss cuts the listening session server-side
// while a waiter waits: the waiter must still get the key once it is
// released, and the next wait must listen again.
func TestPostgresNoticeListenerLoss(t *testing.T) {
	st := postgres(t)
	admin := st.open(t)
	t.Cleanup(func() { _ = admin.Close() })
	ctx := testContext(t, time.Minute)
	if err := admin.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	holder, waiter := st.client(t), st.client(t)
	key := uniqueKey(t)

	listeners := func() int {
		var n int
		err := admin.DB().QueryRowContext(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); listeners() != want; {
			if time.Now().After(deadline) {
				t.Fatalf("%d listening sessions, want %d", listeners(), want)
			}
			time.Sleep(20 * time.Millisecond)
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
		waitFor(1) // the waiter's backend listens
		if round == 0 {
			if _, err := admin.DB().ExecContext(ctx,
				`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'`); err != nil {
				t.Fatal(err)
			}
			waitFor(0)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatalf("round %d: waiter: %v", round, err)
		}
	}
}
