package pglock_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkPostgres compares a try-lock and unlock through distlock (and
// through the backend alone) with the raw statements it needs, on the same
// server in the same run. The interleaved runs alternate the floor and
// distlock iteration by iteration, so that load from elsewhere on the machine
// hits both alike, and report x-floor: distlock's throughput over the
// floor's.
//
//	go test -run '^$' -bench Postgres -benchtime 2000x -count 5 ./backend/pglock/
func BenchmarkPostgres(b *testing.B) {
	s := testserver.Postgres(b)
	ctx := context.Background()
	pool := newPool(b, s, 4)
	const key = "bench/pglock"
	id := pglock.KeyID(key)

	// The two raw statements on conn.
	rawPair := func(b *testing.B, conn *pgxpool.Conn) {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	// A floor on one connection kept for the whole run.
	oneConn := func(b *testing.B) (op func(), done func()) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return func() { rawPair(b, conn) }, conn.Release
	}
	// The fair floor for a lock that pins a connection: one from the pool
	// for each lock, given back after the unlock.
	pinned := func(b *testing.B) func() {
		return func() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			rawPair(b, conn)
			conn.Release()
		}
	}
	// distlock's try-lock and release.
	client := func(b *testing.B, opts ...pglock.Option) (op func(), done func()) {
		c := distlock.New(newBackend(b, pool, opts...))
		return func() {
			l, err := c.TryLock(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}, func() { _ = c.Close() }
	}

	b.Run("raw-one-conn", func(b *testing.B) {
		op, done := oneConn(b)
		defer done()
		loop(b, op)
	})
	b.Run("raw-pinned", func(b *testing.B) { loop(b, pinned(b)) })
	b.Run("backend", func(b *testing.B) { // what pglock adds to the pinned floor
		be := newBackend(b, pool)
		defer be.Close()
		req := driver.AcquireRequest{Key: key, Token: "0123456789abcdef0123456789abcdef", TTL: distlock.DefaultLease}
		loop(b, func() {
			if _, err := be.Acquire(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := be.Release(ctx, key, req.Token); err != nil {
				b.Fatal(err)
			}
		})
	})
	b.Run("distlock", func(b *testing.B) {
		op, done := client(b)
		defer done()
		loop(b, op)
	})
	b.Run("distlock-without-rows", func(b *testing.B) {
		op, done := client(b, pglock.WithoutHolderRows())
		defer done()
		loop(b, op)
	})
	b.Run("interleaved/distlock-vs-one-conn", func(b *testing.B) {
		floor, done := oneConn(b)
		defer done()
		op, cdone := client(b)
		defer cdone()
		interleaved(b, floor, op)
	})
	b.Run("interleaved/distlock-vs-pinned", func(b *testing.B) {
		op, done := client(b)
		defer done()
		interleaved(b, pinned(b), op)
	})
	b.Run("interleaved/without-rows-vs-pinned", func(b *testing.B) {
		op, done := client(b, pglock.WithoutHolderRows())
		defer done()
		interleaved(b, pinned(b), op)
	})
}

func loop(b *testing.B, op func()) {
	for b.Loop() {
		op()
	}
}

// interleaved runs floor and subject alternately and reports each one's time
// per operation and subject's throughput relative to the floor.
func interleaved(b *testing.B, floor, subject func()) {
	var tf, ts time.Duration
	for b.Loop() {
		t0 := time.Now()
		floor()
		t1 := time.Now()
		subject()
		tf, ts = tf+t1.Sub(t0), ts+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tf.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(ts.Nanoseconds())/n, "distlock-ns/op")
	b.ReportMetric(float64(tf)/float64(ts), "x-floor")
}
