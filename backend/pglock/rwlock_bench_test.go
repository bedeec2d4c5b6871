package pglock_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkRWLockAndSemaphore compares an uncontended read hold, write hold
// and permit, each taken and released through distlock, with a lock's
// try-lock and release on the same backend, alternating iteration by
// iteration (interleaved: x-floor is the hold's throughput over the lock's).
//
//	go test -run '^$' -bench RWLockAndSemaphore -benchtime 2000x -count 3 ./backend/pglock/
func BenchmarkRWLockAndSemaphore(b *testing.B) {
	s := testserver.Postgres(b)
	ctx := context.Background()
	c := distlock.New(newBackend(b, newPool(b, s, 4)))
	defer c.Close()
	m, err := c.RWMutex("bench/pglock/rw")
	if err != nil {
		b.Fatal(err)
	}
	sem, err := c.Semaphore("bench/pglock/sem", 4)
	if err != nil {
		b.Fatal(err)
	}
	op := func(take func(context.Context, ...distlock.Option) (*distlock.Lock, error)) func() {
		return func() {
			l, err := take(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	lock := op(func(ctx context.Context, o ...distlock.Option) (*distlock.Lock, error) {
		return c.TryLock(ctx, "bench/pglock/lock", o...)
	})
	for _, h := range []struct {
		name string
		op   func()
	}{
		{"read", op(m.TryRLock)},
		{"write", op(m.TryLock)},
		{"permit", op(sem.TryAcquire)},
	} {
		h.op() // the first use creates the tables
		b.Run(h.name+"-vs-lock", func(b *testing.B) { interleaved(b, lock, h.op) })
	}
}
