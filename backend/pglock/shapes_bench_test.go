package pglock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// The shapes users run, each against the raw advisory pair in the same run,
// in alternating rounds of 256 acquisitions so that load on the machine hits
// both. Locks use WithLease(30s) (no watchdog). "raw/<name>" is <name>'s
// throughput relative to the raw pair's.
//
//	go test -run '^$' -bench Shapes -benchtime 4096x ./backend/pglock/

// BenchmarkShapesUncontended: one goroutine cycling over 64 keys, Lock and
// Release, through one client on a pool of its own; the raw pair is
// pg_try_advisory_lock and pg_advisory_unlock on one pgx connection.
func BenchmarkShapesUncontended(b *testing.B) {
	s := testserver.Postgres(b)
	ctx := context.Background()
	raw, err := pgx.Connect(ctx, testserver.PostgresDSN(s))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.Close(context.Background()) })
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("shapes/uncontended/%d", i)
	}
	var rawNext, next atomic.Int64
	peer := locktest.Contender{Name: "raw", Lock: func(ctx context.Context, _ int) (func() error, error) {
		id := pglock.KeyID(keys[rawNext.Add(1)%64])
		var ok bool
		if err := raw.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
			return nil, fmt.Errorf("try lock: %v %w", ok, err)
		}
		return func() error { return raw.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok) }, nil
	}}
	cs := []locktest.Contender{peer}
	// Where the time goes: the raw pair on a connection taken from a pool
	// for each lock; and pglock's own statements (the lock with a fence, the
	// lock with a fence and the holder row) then the unlock, on one
	// connection.
	pool := newPool(b, s, 4)
	mig := newBackend(b, pool)
	if err := mig.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	_ = mig.Close()
	var poolNext, sqlNext atomic.Int64
	cs = append(cs, locktest.Contender{Name: "raw+pool", Lock: func(ctx context.Context, _ int) (func() error, error) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		id := pglock.KeyID(keys[poolNext.Add(1)%64])
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
			conn.Release()
			return nil, fmt.Errorf("try lock: %v %w", ok, err)
		}
		return func() error {
			defer conn.Release()
			return conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok)
		}, nil
	}})
	const fenceRow = `INSERT INTO distlock_pg_locks (lock_key, lock_id, token, fence, pid, expires_at, meta)
SELECT $2, $1, $3, nextval('distlock_pg_fence'), pg_backend_pid(), clock_timestamp() + $4 * interval '1 millisecond', $5
WHERE pg_try_advisory_lock($1)
ON CONFLICT (lock_key) DO UPDATE SET lock_id = EXCLUDED.lock_id, token = EXCLUDED.token, fence = EXCLUDED.fence,
	pid = EXCLUDED.pid, expires_at = EXCLUDED.expires_at, meta = EXCLUDED.meta
RETURNING fence`
	// sql-fence+row-async is the same statement with synchronous_commit off:
	// a commit that does not wait for its WAL to reach the disk.
	for _, st := range []struct{ name, sql, setup string }{
		{"sql-fence", "SELECT nextval('distlock_pg_fence') WHERE pg_try_advisory_lock($1)", ""},
		{"sql-fence+row", fenceRow, ""},
		{"sql-fence+row-async", fenceRow, "SET synchronous_commit = off"},
	} {
		conn, err := pgx.Connect(ctx, testserver.PostgresDSN(s))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close(context.Background()) })
		if st.setup != "" {
			if _, err := conn.Exec(ctx, st.setup); err != nil {
				b.Fatal(err)
			}
		}
		cs = append(cs, locktest.Contender{Name: st.name, Lock: func(ctx context.Context, _ int) (func() error, error) {
			key := keys[sqlNext.Add(1)%64]
			id := pglock.KeyID(key)
			args := []any{id}
			if st.sql == fenceRow {
				args = append(args, key, "0123456789abcdef0123456789abcdef", int64(30000), []byte("{}"))
			}
			var fence int64
			if err := conn.QueryRow(ctx, st.sql, args...).Scan(&fence); err != nil {
				return nil, err
			}
			return func() error {
				var ok bool
				return conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok)
			}, nil
		}})
	}
	for _, v := range variants {
		c := distlock.New(newBackend(b, newPool(b, s, 4), v.opts...))
		b.Cleanup(func() { _ = c.Close() })
		cs = append(cs, locktest.Contender{Name: v.name, Lock: func(ctx context.Context, _ int) (func() error, error) {
			l, err := c.TryLock(ctx, keys[next.Add(1)%64], distlock.WithLease(30*time.Second))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}})
	}
	locktest.CompareContended(b, locktest.Load{}, cs...)
}

// BenchmarkShapesContended: 16 clients, each on a pool of one connection,
// lock one key, with no work and with 1 ms of work outside the lock; the raw
// pair is pg_advisory_lock and pg_advisory_unlock on 16 connections.
func BenchmarkShapesContended(b *testing.B) {
	const lockers = 16
	s := testserver.Postgres(b)
	ctx := context.Background()
	const key = "shapes/contended"
	id := pglock.KeyID(key)
	raws := make([]*pgx.Conn, lockers)
	for i := range raws {
		c, err := pgx.Connect(ctx, testserver.PostgresDSN(s))
		if err != nil {
			b.Fatal(err)
		}
		raws[i] = c
		b.Cleanup(func() { _ = c.Close(context.Background()) })
	}
	peer := locktest.Contender{Name: "raw", Lock: func(ctx context.Context, i int) (func() error, error) {
		if _, err := raws[i].Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
			return nil, err
		}
		return func() error {
			var ok bool
			return raws[i].QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok)
		}, nil
	}}
	cs := []locktest.Contender{peer}
	for _, v := range variants {
		clients := make([]*distlock.Client, lockers)
		for i := range clients {
			clients[i] = distlock.New(newBackend(b, newPool(b, s, 1), v.opts...))
			b.Cleanup(func() { _ = clients[i].Close() })
		}
		cs = append(cs, locktest.Contender{Name: v.name, Lock: func(ctx context.Context, i int) (func() error, error) {
			l, err := clients[i].Lock(ctx, key, distlock.WithLease(30*time.Second))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}})
	}
	for _, think := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("think=%v", think), func(b *testing.B) { locktest.CompareContended(b, locktest.Load{Lockers: lockers, Think: think}, cs...) })
	}
}

// variants are the backend configurations the shapes measure.
var variants = []struct {
	name string
	opts []pglock.Option
}{
	{"default", nil},
	{"deferred", []pglock.Option{pglock.WithDeferredHolderRows()}},
	{"norows", []pglock.Option{pglock.WithoutHolderRows()}},
}
