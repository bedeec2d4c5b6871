package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/idem/idemtest"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkPostgres compares, in one run on one server, a replay of a
// recorded result with a plain SELECT by primary key, and a first run
// (nothing recorded) with a lock and release of the same lock store.
func BenchmarkPostgres(b *testing.B) {
	ctx := context.Background()
	k, _, pool, closeAll, err := newKeeper(ctx, testserver.PostgresDSN(testserver.Postgres(b)))
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll()
	lb, err := pglock.New(pool)
	if err != nil {
		b.Fatal(err)
	}
	c := distlock.New(lb)
	defer c.Close()
	value := []byte("receipt-0123456789")
	fn := func(context.Context, uint64) ([]byte, error) { return value, nil }
	if _, err := pool.Exec(ctx, `CREATE TABLE plain (key text PRIMARY KEY, value bytea NOT NULL);
		INSERT INTO plain VALUES ('plain', 'receipt-0123456789')`); err != nil {
		b.Fatal(err)
	}
	if _, err := k.Do(ctx, "recorded", []byte("request"), fn); err != nil {
		b.Fatal(err)
	}
	b.Run("Select", func(b *testing.B) {
		var v []byte
		for b.Loop() {
			if err := pool.QueryRow(ctx, `SELECT value FROM plain WHERE key = $1`, "plain").Scan(&v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Replay", func(b *testing.B) {
		for b.Loop() {
			if r, err := k.Do(ctx, "recorded", []byte("request"), fn); err != nil || !r.Replayed {
				b.Fatal(r, err)
			}
		}
	})
	b.Run("LockRelease", func(b *testing.B) {
		for b.Loop() {
			l, err := c.TryLock(ctx, "bench-lock", distlock.WithLease(idemtest.Lease), distlock.WithWatchdog(true))
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("FirstRun", func(b *testing.B) {
		prefix, i := "first/"+strconv.FormatInt(time.Now().UnixNano(), 10)+"/", 0
		for b.Loop() {
			i++
			if r, err := k.Do(ctx, prefix+strconv.Itoa(i), []byte("request"), fn); err != nil || r.Replayed {
				b.Fatal(r, err)
			}
		}
	})
}
