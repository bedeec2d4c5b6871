package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkLeaseTable compares an acquire and release through distlock (and
// through the backend alone) with the raw INSERT and DELETE pair of a lease
// table, without a fence ("raw") and with a fence ("raw-fenced": nextval on
// PostgreSQL, the fence floor row read on MariaDB), all prepared, on the same
// server in the same run:
//
// The interleaved runs alternate the floor and distlock iteration by
// iteration and report x-floor, distlock's throughput over the floor's.
//
//	go test -run '^$' -bench LeaseTable -benchtime 2000x -count 5 ./backend/sqllock/
func BenchmarkLeaseTable(b *testing.B) {
	b.Run("postgres", func(b *testing.B) {
		s := testserver.Postgres(b)
		benchStore(b, store{s: s, driver: "pgx", dsn: testserver.PostgresDSN(s), dialect: sqllock.Postgres},
			"INSERT INTO distlock_leases (lock_key, token, fence, expires_at, owner, metadata) VALUES ($1, $2, %s, clock_timestamp() + interval '30 seconds', '', '{}')",
			"nextval('distlock_fence')", "DELETE FROM distlock_leases WHERE lock_key = $1 AND token = $2")
	})
	b.Run("mariadb", func(b *testing.B) {
		s := testserver.MariaDB(b)
		benchStore(b, store{s: s, driver: "mysql", dsn: testserver.MariaDBDSN(s), dialect: sqllock.MariaDB},
			"INSERT INTO distlock_leases (lock_key, token, fence, expires_at, owner, metadata) SELECT ?, ?, %s, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, '', '{}' FROM distlock_fence_floor f WHERE f.id = 1",
			"f.n + 1", "DELETE FROM distlock_leases WHERE lock_key = ? AND token = ?")
	})
}

// benchStore runs the variants; insert has a %s where the fence goes.
func benchStore(b *testing.B, st store, insert, nextFence, del string) {
	ctx := context.Background()
	be := st.open(b)
	if err := be.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	c := distlock.New(be)
	defer c.Close()
	const token = "0123456789abcdef0123456789abcdef"

	ins := prepare(b, be, fmt.Sprintf(insert, "1"))
	fenced := prepare(b, be, fmt.Sprintf(insert, nextFence))
	rm := prepare(b, be, del)
	// The raw pair: insert the row (with or without a fence), delete it.
	raw := func(ins *sql.Stmt) func() error {
		return func() error {
			if _, err := ins.ExecContext(ctx, "bench/raw", token); err != nil {
				return err
			}
			_, err := rm.ExecContext(ctx, "bench/raw", token)
			return err
		}
	}
	backend := func() error {
		req := driver.AcquireRequest{Key: "bench/backend", Token: token, TTL: distlock.DefaultLease}
		if _, err := be.Acquire(ctx, req); err != nil {
			return err
		}
		return be.Release(ctx, req.Key, token)
	}
	client := func() error {
		l, err := c.TryLock(ctx, "bench/distlock")
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	b.Run("raw", func(b *testing.B) { loop(b, raw(ins)) })
	b.Run("raw-fenced", func(b *testing.B) { loop(b, raw(fenced)) })
	b.Run("backend", func(b *testing.B) { loop(b, backend) })
	b.Run("distlock", func(b *testing.B) { loop(b, client) })
	b.Run("interleaved/distlock-vs-raw", func(b *testing.B) { interleaved(b, raw(ins), client) })
	b.Run("interleaved/distlock-vs-raw-fenced", func(b *testing.B) { interleaved(b, raw(fenced), client) })
	b.Run("interleaved/backend-vs-raw-fenced", func(b *testing.B) { interleaved(b, raw(fenced), backend) })
}

func prepare(b *testing.B, be *sqllock.Backend, q string) *sql.Stmt {
	s, err := be.DB().PrepareContext(context.Background(), q)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func loop(b *testing.B, op func() error) {
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
}

// interleaved runs floor and subject alternately, so that load from
// elsewhere on the machine hits both alike, and reports each one's time per
// operation and subject's throughput relative to the floor (x-floor).
func interleaved(b *testing.B, floor, subject func() error) {
	var tf, ts time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := floor(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := subject(); err != nil {
			b.Fatal(err)
		}
		tf, ts = tf+t1.Sub(t0), ts+time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(float64(tf.Nanoseconds())/n, "floor-ns/op")
	b.ReportMetric(float64(ts.Nanoseconds())/n, "distlock-ns/op")
	b.ReportMetric(float64(tf)/float64(ts), "x-floor")
}
