package sqllock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkShapesPostgres measures the lease table on PostgreSQL in the
// shapes users run, against its own uncontended rate in the same run (one
// goroutine cycling over 64 keys through one client), in alternating rounds
// of 256 acquisitions so that load on the machine hits all alike: 16 clients
// (each a replica with its own pool) on one key, and one client shared by 16
// goroutines, with no work and with 1 ms of work outside the lock (the
// uncontended rate is taken without it). Locks use WithLease(30s); the
// "-noqueue" variants use WithoutWaitQueue. "uncontended/<name>" is <name>'s
// rate relative to the uncontended one; the goal is at least 0.5, with p99
// wait at most 10 ms and top/fair at most 1.1.
//
//	go test -run '^$' -bench ShapesPostgres -benchtime 2048x ./backend/sqllock/
func BenchmarkShapesPostgres(b *testing.B) {
	s := testserver.Postgres(b)
	st := store{s: s, driver: "pgx", dsn: testserver.PostgresDSN(s), dialect: sqllock.Postgres}
	ctx := context.Background()
	open := func(opts ...sqllock.Option) *distlock.Client {
		be := st.open(b, opts...)
		if err := be.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		c := distlock.New(be)
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	const lockers = 16
	solo := open()
	shared, sharedNQ := open(), open(sqllock.WithoutWaitQueue())
	clients, clientsNQ := make([]*distlock.Client, lockers), make([]*distlock.Client, lockers)
	for i := range clients {
		clients[i], clientsNQ[i] = open(), open(sqllock.WithoutWaitQueue())
	}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("shapes/uncontended/%d", i)
	}
	var next atomic.Int64
	lease := distlock.WithLease(30 * time.Second)
	uncontended := contender{name: "uncontended", lockers: 1, lock: func(ctx context.Context, _ int) (func() error, error) {
		l, err := solo.TryLock(ctx, keys[next.Add(1)%64], lease)
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(ctx) }, nil
	}}
	on := func(name string, client func(i int) *distlock.Client) contender {
		key := "shapes/" + name // the variants do not share a queue
		return contender{name: name, lockers: lockers, lock: func(ctx context.Context, i int) (func() error, error) {
			l, err := client(i).Lock(ctx, key, lease, distlock.WithWait(time.Minute))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}}
	}
	sixteen := on("16clients", func(i int) *distlock.Client { return clients[i] })
	one := on("1client", func(int) *distlock.Client { return shared })
	sixteenNQ := on("16clients-noqueue", func(i int) *distlock.Client { return clientsNQ[i] })
	oneNQ := on("1client-noqueue", func(int) *distlock.Client { return sharedNQ })
	for _, think := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("think=%v", think), func(b *testing.B) { contendCompare(b, think, uncontended, sixteen, sixteenNQ, one, oneNQ) })
	}
}

// contender is one way of taking keys that contendCompare measures, by
// lockers goroutines: lock is called by goroutine i and returns the release.
type contender struct {
	name    string
	lockers int
	lock    func(ctx context.Context, i int) (release func() error, err error)
}

// contendCompare makes b.N acquisitions with each contender, its goroutines
// each looping lock, release, think, in alternating rounds of 256
// acquisitions. It reports per contender acquisitions per second, the p99
// and max wait of an acquisition, the largest share one goroutine got
// relative to a fair share, and for every contender after the first its
// rate relative to the first's ("<first>/<name>").
func contendCompare(b *testing.B, think time.Duration, cs ...contender) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type tally struct {
		took   time.Duration
		waits  []time.Duration
		counts []int
	}
	ts := make([]tally, len(cs))
	for i, c := range cs {
		ts[i].counts = make([]int, c.lockers)
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 256)
		for k, c := range cs {
			think := think
			if c.lockers == 1 {
				think = 0 // the reference rate is the store's, without work
			}
			if err := contendRound(ctx, n, think, c, &ts[k].took, &ts[k].waits, ts[k].counts); err != nil {
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

		if c.lockers > 1 {
			b.ReportMetric(at(0.99), c.name+"-p99-ms")
			b.ReportMetric(at(1), c.name+"-max-ms")
			b.ReportMetric(float64(slices.Max(t.counts))*float64(c.lockers)/float64(len(t.waits)), c.name+"-top/fair")
		}
		if k > 0 {
			b.ReportMetric(ts[0].took.Seconds()/t.took.Seconds(), cs[0].name+"/"+c.name)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// contendRound makes n acquisitions of c and adds the wall time, each
// acquisition's wait and each goroutine's count.
func contendRound(ctx context.Context, n int, think time.Duration, c contender, took *time.Duration, waits *[]time.Duration, counts []int) error {
	var (
		left   atomic.Int64
		inside atomic.Int32
		mu     sync.Mutex
		wg     sync.WaitGroup
		errs   = make(chan error, c.lockers)
	)
	left.Store(int64(n))
	start := time.Now()
	for i := range c.lockers {
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
				if c.lockers > 1 && inside.Add(1) != 1 {
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
