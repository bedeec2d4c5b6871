package sqllock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkLeaseTable compares an acquire and release through distlock (and
// through the backend alone) with the raw INSERT and DELETE pair of a lease
// table, without a fence ("raw") and with the sequence call a fence needs
// ("raw-fenced"), all prepared, on the same server in the same run:
//
//	go test -run '^$' -bench LeaseTable -benchmem ./backend/sqllock/
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
			"INSERT INTO distlock_leases (lock_key, token, fence, expires_at, owner, metadata) VALUES (?, ?, %s, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, '', '{}')",
			"NEXTVAL(distlock_fence)", "DELETE FROM distlock_leases WHERE lock_key = ? AND token = ?")
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

	raw := func(insert string) func(b *testing.B) {
		return func(b *testing.B) {
			ins, err := be.DB().PrepareContext(ctx, insert)
			if err != nil {
				b.Fatal(err)
			}
			defer ins.Close()
			rm, err := be.DB().PrepareContext(ctx, del)
			if err != nil {
				b.Fatal(err)
			}
			defer rm.Close()
			for b.Loop() {
				if _, err := ins.ExecContext(ctx, "bench/raw", token); err != nil {
					b.Fatal(err)
				}
				if _, err := rm.ExecContext(ctx, "bench/raw", token); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("raw", raw(fmt.Sprintf(insert, "1")))
	b.Run("raw-fenced", raw(fmt.Sprintf(insert, nextFence)))
	b.Run("backend", func(b *testing.B) {
		req := distlock.AcquireRequest{Key: "bench/backend", Token: token, TTL: distlock.DefaultLease}
		for b.Loop() {
			if _, err := be.Acquire(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := be.Release(ctx, req.Key, token); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("distlock", func(b *testing.B) {
		for b.Loop() {
			l, err := c.TryLock(ctx, "bench/distlock")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
