package pglock_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkPostgres compares a try-lock and unlock through distlock (and
// through the backend alone) with the raw statements it needs, in the same
// run on the same server:
//
//	go test -run '^$' -bench Postgres -benchmem ./backend/pglock/
func BenchmarkPostgres(b *testing.B) {
	s := testserver.Postgres(b)
	ctx := context.Background()
	pool := newPool(b, s, 4)
	key := "bench/pglock"
	id := pglock.KeyID(key)

	// The floor: the two statements on one connection held throughout.
	b.Run("raw-one-conn", func(b *testing.B) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Release()
		var ok bool
		for b.Loop() {
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	// The fair floor for a lock that pins a connection: take one from the
	// pool for each lock and give it back after the unlock.
	b.Run("raw-pinned", func(b *testing.B) {
		var ok bool
		for b.Loop() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
			conn.Release()
		}
	})
	// The backend alone: what pglock adds to the pinned floor.
	b.Run("backend", func(b *testing.B) {
		be := pglock.New(pool)
		defer be.Close()
		req := distlock.AcquireRequest{Key: key, Token: "0123456789abcdef0123456789abcdef", TTL: distlock.DefaultLease}
		for b.Loop() {
			if _, err := be.Acquire(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := be.Release(ctx, key, req.Token); err != nil {
				b.Fatal(err)
			}
		}
	})
	client := func(opts ...pglock.Option) func(b *testing.B) {
		return func(b *testing.B) {
			c := distlock.New(pglock.New(pool, opts...))
			defer c.Close()
			for b.Loop() {
				l, err := c.TryLock(ctx, key)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("distlock", client())
	b.Run("distlock-without-rows", client(pglock.WithoutHolderRows()))
}
