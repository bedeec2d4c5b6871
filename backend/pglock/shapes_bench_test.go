package pglock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
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
	peer := contender{name: "raw", lock: func(ctx context.Context, _ int) (func() error, error) {
		id := pglock.KeyID(keys[rawNext.Add(1)%64])
		var ok bool
		if err := raw.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
			return nil, fmt.Errorf("try lock: %v %w", ok, err)
		}
		return func() error { return raw.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok) }, nil
	}}
	cs := []contender{peer}
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
	cs = append(cs, contender{name: "raw+pool", lock: func(ctx context.Context, _ int) (func() error, error) {
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
	for _, st := range []struct{ name, sql string }{
		{"sql-fence", "SELECT nextval('distlock_pg_fence') WHERE pg_try_advisory_lock($1)"},
		{"sql-fence+row", `INSERT INTO distlock_pg_locks (lock_key, lock_id, token, fence, pid, expires_at, meta)
SELECT $2, $1, $3, nextval('distlock_pg_fence'), pg_backend_pid(), clock_timestamp() + $4 * interval '1 millisecond', $5
WHERE pg_try_advisory_lock($1)
ON CONFLICT (lock_key) DO UPDATE SET lock_id = EXCLUDED.lock_id, token = EXCLUDED.token, fence = EXCLUDED.fence,
	pid = EXCLUDED.pid, expires_at = EXCLUDED.expires_at, meta = EXCLUDED.meta
RETURNING fence`},
	} {
		conn, err := pgx.Connect(ctx, testserver.PostgresDSN(s))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close(context.Background()) })
		cs = append(cs, contender{name: st.name, lock: func(ctx context.Context, _ int) (func() error, error) {
			key := keys[sqlNext.Add(1)%64]
			id := pglock.KeyID(key)
			args := []any{id}
			if st.name == "sql-fence+row" {
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
		cs = append(cs, contender{name: v.name, lock: func(ctx context.Context, _ int) (func() error, error) {
			l, err := c.TryLock(ctx, keys[next.Add(1)%64], distlock.WithLease(30*time.Second))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}})
	}
	contendCompare(b, 1, 0, cs...)
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
	peer := contender{name: "raw", lock: func(ctx context.Context, i int) (func() error, error) {
		if _, err := raws[i].Exec(ctx, "SELECT pg_advisory_lock($1)", id); err != nil {
			return nil, err
		}
		return func() error {
			var ok bool
			return raws[i].QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok)
		}, nil
	}}
	cs := []contender{peer}
	for _, v := range variants {
		clients := make([]*distlock.Client, lockers)
		for i := range clients {
			clients[i] = distlock.New(newBackend(b, newPool(b, s, 1), v.opts...))
			b.Cleanup(func() { _ = clients[i].Close() })
		}
		cs = append(cs, contender{name: v.name, lock: func(ctx context.Context, i int) (func() error, error) {
			l, err := clients[i].Lock(ctx, key, distlock.WithLease(30*time.Second))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}})
	}
	for _, think := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("think=%v", think), func(b *testing.B) { contendCompare(b, lockers, think, cs...) })
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

// contender is one way of taking a key that contendCompare measures: lock is
// called by goroutine i and returns the release.
type contender struct {
	name string
	lock func(ctx context.Context, i int) (release func() error, err error)
}

// contendCompare makes b.N acquisitions with each contender, by lockers
// goroutines each looping lock, release, think, in alternating rounds of 256
// acquisitions. It reports per contender acquisitions per second, the p99
// and max wait of an acquisition, the largest share one goroutine got
// relative to a fair share, and for every contender after the first its
// throughput relative to the first's ("<first>/<name>").
func contendCompare(b *testing.B, lockers int, think time.Duration, cs ...contender) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type tally struct {
		took   time.Duration
		waits  []time.Duration
		counts []int
	}
	ts := make([]tally, len(cs))
	for i := range ts {
		ts[i].counts = make([]int, lockers)
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 256)
		for k, c := range cs {
			if err := contendRound(ctx, lockers, n, think, c, &ts[k].took, &ts[k].waits, ts[k].counts); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
		}
		done += n
	}
	b.StopTimer()
	for k, c := range cs {
		t := ts[k]
		slices.Sort(t.waits)
		at := func(q float64) float64 { return float64(t.waits[int(q*float64(len(t.waits)-1))]) / 1e6 }
		b.ReportMetric(float64(len(t.waits))/t.took.Seconds(), c.name+"-acq/s")
		if lockers > 1 {
			b.ReportMetric(at(0.99), c.name+"-p99-ms")
			b.ReportMetric(at(1), c.name+"-max-ms")
			b.ReportMetric(float64(slices.Max(t.counts))*float64(lockers)/float64(len(t.waits)), c.name+"-top/fair")
		}
		if k > 0 {
			b.ReportMetric(ts[0].took.Seconds()/t.took.Seconds(), cs[0].name+"/"+c.name)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// contendRound makes n acquisitions of c by lockers goroutines and adds the
// wall time, each acquisition's wait and each goroutine's count.
func contendRound(ctx context.Context, lockers, n int, think time.Duration, c contender, took *time.Duration, waits *[]time.Duration, counts []int) error {
	var (
		left   atomic.Int64
		inside atomic.Int32
		mu     sync.Mutex
		wg     sync.WaitGroup
		errs   = make(chan error, lockers)
	)
	left.Store(int64(n))
	start := time.Now()
	for i := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				release, err := c.lock(ctx, i)
				if err != nil {
					errs <- err
					return
				}
				wait := time.Since(t0)
				if inside.Add(1) != 1 {
					errs <- fmt.Errorf("two holders at once")
				}
				inside.Add(-1)
				if err := release(); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				*waits = append(*waits, wait)
				counts[i]++
				mu.Unlock()
				if think > 0 {
					time.Sleep(think)
				}
			}
		}()
	}
	wg.Wait()
	*took += time.Since(start)
	close(errs)
	return <-errs
}
