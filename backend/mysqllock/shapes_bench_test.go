package mysqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/internal/testserver"
)

// The shapes users run, each against the raw GET_LOCK/RELEASE_LOCK pair in
// the same run, in alternating rounds of 256 acquisitions so that load on
// the machine hits both. Locks use WithLease(30s) (no watchdog). Every
// handle sets interpolateParams=true. "raw/mysqllock" is mysqllock's
// throughput relative to the raw pair's.
//
//	go test -run '^$' -bench Shapes -benchtime 4096x -count 3 ./backend/mysqllock/

// BenchmarkShapesUncontended: one goroutine cycling over 64 keys, TryLock
// and Release, through one client on a handle of its own; the raw pair is
// GET_LOCK(name, 0) and RELEASE_LOCK(name) on one pinned connection.
func BenchmarkShapesUncontended(b *testing.B) {
	s := testserver.MariaDB(b)
	raw := pinnedConns(b, s, 1)[0]
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("shapes/uncontended/%d", i)
	}
	var rawNext, next atomic.Int64
	c := distlock.New(newBackend(b, openDB(b, s, 4)))
	contendCompare(b, 1, 0,
		contender{name: "raw", lock: func(ctx context.Context, _ int) (func() error, error) {
			return rawLock(ctx, raw, mysqllock.LockName(keys[rawNext.Add(1)%64]), 0)
		}},
		contender{name: "mysqllock", lock: func(ctx context.Context, _ int) (func() error, error) {
			l, err := c.TryLock(ctx, keys[next.Add(1)%64], distlock.WithLease(30*time.Second))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}})
}

// BenchmarkShapesContended: 16 clients, each on a handle of one connection,
// lock one key, with no work and with 1 ms of work outside the lock; the raw
// pair is GET_LOCK(name, 60) and RELEASE_LOCK(name) on 16 pinned
// connections.
func BenchmarkShapesContended(b *testing.B) {
	const lockers = 16
	s := testserver.MariaDB(b)
	const key = "shapes/contended"
	name := mysqllock.LockName(key)
	raws := pinnedConns(b, s, lockers)
	clients := make([]*distlock.Client, lockers)
	for i := range clients {
		clients[i] = distlock.New(newBackend(b, openDB(b, s, 2)))
	}
	raw := contender{name: "raw", lock: func(ctx context.Context, i int) (func() error, error) {
		return rawLock(ctx, raws[i], name, 60)
	}}
	mine := contender{name: "mysqllock", lock: func(ctx context.Context, i int) (func() error, error) {
		l, err := clients[i].Lock(ctx, key, distlock.WithLease(30*time.Second), distlock.WithWait(time.Minute))
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(ctx) }, nil
	}}
	for _, think := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("think=%v", think), func(b *testing.B) { contendCompare(b, lockers, think, raw, mine) })
	}
}

// pinnedConns returns n connections of a handle of their own.
func pinnedConns(b *testing.B, s *testserver.Server, n int) []*sql.Conn {
	db := openDB(b, s, n)
	conns := make([]*sql.Conn, n)
	for i := range conns {
		c, err := db.Conn(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		conns[i] = c
	}
	return conns
}

// rawLock takes name with GET_LOCK on conn and returns its RELEASE_LOCK.
func rawLock(ctx context.Context, conn *sql.Conn, name string, wait int) (func() error, error) {
	var ok sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, wait).Scan(&ok); err != nil || ok.Int64 != 1 {
		return nil, fmt.Errorf("GET_LOCK %q: %v %w", name, ok, err)
	}
	return func() error { return conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&ok) }, nil
}

// contender is one way of taking a key that contendCompare measures: lock is
// called by goroutine i and returns the release.
type contender struct {
	name string
	lock func(ctx context.Context, i int) (release func() error, err error)
}

// contendCompare makes b.N acquisitions with each contender, by lockers
// goroutines each looping lock, release, think, in alternating rounds of 256
// acquisitions. It reports per contender acquisitions per second, with
// several lockers the p99 and max wait of an acquisition and the largest
// share one goroutine got relative to a fair share, and for every contender
// after the first its throughput relative to the first's.
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
		wg.Go(func() {
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
		})
	}
	wg.Wait()
	*took += time.Since(start)
	close(errs)
	return <-errs
}
