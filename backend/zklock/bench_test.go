package zklock_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkLockRelease compares Lock+Release through distlock.Client with
// ZooKeeper's floor, in alternating rounds: create an ephemeral sequential
// node, then delete it; and that floor plus the listing of the queue, which a
// queue lock needs unless it learns its place otherwise. "serial" measures
// latency and "parallel" throughput, each goroutine on a key of its own;
// floor/distlock is distlock's throughput relative to the floor's.
func BenchmarkLockRelease(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	root := uniqueRoot(b)
	c := distlock.New(dial(b, srv.Addr(), root))
	b.Cleanup(func() { _ = c.Close() })
	conn := admin(b, srv.Addr())
	for i := range 64 { // the floors' parents exist before the timed calls
		p := fmt.Sprintf("%s/floor-bench-%d", root, i)
		if _, err := conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			b.Fatal(err)
		}
	}
	floor := locktest.Op{Name: "floor", Do: func(_ context.Context, key string) error {
		node, err := conn.Create(root+"/floor-"+key+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			return err
		}
		return conn.Delete(node, -1)
	}}
	floorList := locktest.Op{Name: "floor+list", Do: func(_ context.Context, key string) error {
		parent := root + "/floor-" + key
		node, err := conn.Create(parent+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			return err
		}
		if _, _, err := conn.Children(parent); err != nil {
			return err
		}
		return conn.Delete(node, -1)
	}}
	lock := locktest.Op{Name: "distlock", Do: func(ctx context.Context, key string) error {
		l, err := c.Lock(ctx, key)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) { locktest.Compare(b, mode, floor, floorList, lock) })
	}
}

// BenchmarkContended runs 16 goroutines on 4 sessions against one key.
func BenchmarkContended(b *testing.B) {
	const lockers, conns = 16, 4
	srv := testserver.ZooKeeper(b)
	root := uniqueRoot(b)
	cs := make([]*distlock.Client, conns)
	for i := range cs {
		cs[i] = distlock.New(dial(b, srv.Addr(), root))
		b.Cleanup(func() { _ = cs[i].Close() })
	}
	locktest.Contend(b, lockers, func(ctx context.Context, i int) (func() error, error) {
		l, err := cs[i%conns].Lock(ctx, "contended")
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(ctx) }, nil
	})
}

// BenchmarkContendedVsNewLock compares distlock with go-zookeeper's
// zk.NewLock on one key, 16 goroutines in all, in the session layouts users
// run: 4 sessions of 4 goroutines and 1 session of 16, with no work and with
// 1 ms of work outside the lock. Each session is a replica: a distlock.Client
// over its own backend, or a zk.Conn whose goroutines each have a zk.Lock.
// distlock locks with WithLease(30s) (no watchdog). The two take turns in
// rounds of 256 acquisitions, so load on the machine hits both;
// "newlock/distlock" is distlock's throughput relative to zk.NewLock's.
func BenchmarkContendedVsNewLock(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	for _, layout := range []struct{ sessions, perSession int }{{4, 4}, {1, 16}} {
		for _, think := range []time.Duration{0, time.Millisecond} {
			name := fmt.Sprintf("%dx%d/think=%v", layout.sessions, layout.perSession, think)
			b.Run(name, func(b *testing.B) {
				root := uniqueRoot(b)
				lockers := layout.sessions * layout.perSession
				cs := make([]*distlock.Client, layout.sessions)
				locks := make([]*zk.Lock, lockers)
				for i := range cs {
					cs[i] = distlock.New(dial(b, srv.Addr(), root))
					b.Cleanup(func() { _ = cs[i].Close() })
					conn := admin(b, srv.Addr())
					for j := range layout.perSession {
						locks[i*layout.perSession+j] = zk.NewLock(conn, root+"/newlock", zk.WorldACL(zk.PermAll))
					}
				}
				peer := contender{name: "newlock", lock: func(_ context.Context, i int) (func() error, error) {
					l := locks[i]
					if err := l.Lock(); err != nil {
						return nil, err
					}
					return l.Unlock, nil
				}}
				ours := contender{name: "distlock", lock: func(ctx context.Context, i int) (func() error, error) {
					l, err := cs[i/layout.perSession].Lock(ctx, "contended", distlock.WithLease(30*time.Second))
					if err != nil {
						return nil, err
					}
					return func() error { return l.Release(ctx) }, nil
				}}
				contendCompare(b, lockers, think, func() int64 { return received(b, srv.Addr()) }, peer, ours)
			})
		}
	}
}

// contender is one way of taking a key that contendCompare measures: lock is
// called by goroutine i and returns the release.
type contender struct {
	name string
	lock func(ctx context.Context, i int) (release func() error, err error)
}

// contendCompare makes b.N acquisitions of one key with each contender, by
// lockers goroutines each looping lock, release, think, in alternating
// rounds of 256 acquisitions. It reports per contender acquisitions per
// second, the p99 and max wait of an acquisition, the largest share one
// goroutine got relative to a fair share, the requests the server received
// per acquisition (from count, a server-wide counter read between rounds),
// and for every contender after the first its throughput relative to the
// first's ("<first>/<name>").
func contendCompare(b *testing.B, lockers int, think time.Duration, count func() int64, cs ...contender) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	type tally struct {
		took   time.Duration
		reqs   int64
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
			before := count()
			if err := contendRound(ctx, lockers, n, think, c, &ts[k].took, &ts[k].waits, ts[k].counts); err != nil {
				b.Fatalf("%s: %v", c.name, err)
			}
			ts[k].reqs += count() - before - 1 // the counter's own request
		}
		done += n
	}
	b.StopTimer()
	for k, c := range cs {
		t := ts[k]
		slices.Sort(t.waits)
		at := func(q float64) float64 { return float64(t.waits[int(q*float64(len(t.waits)-1))]) / 1e6 }
		b.ReportMetric(float64(len(t.waits))/t.took.Seconds(), c.name+"-acq/s")
		b.ReportMetric(at(0.99), c.name+"-p99-ms")
		b.ReportMetric(at(1), c.name+"-max-ms")
		b.ReportMetric(float64(slices.Max(t.counts))*float64(lockers)/float64(len(t.waits)), c.name+"-top/fair")
		b.ReportMetric(float64(t.reqs)/float64(len(t.waits)), c.name+"-req/acq")
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

// received returns the number of packets the server at addr has received,
// from its "srvr" command (which counts as one, and pings count too).
func received(b *testing.B, addr string) int64 {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "Received: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("srvr: no Received line in %q", out)
	return 0
}
