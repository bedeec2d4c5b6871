package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redlock"
	"github.com/distlock/distlock/driver"
)

// BenchmarkRedlock: Lock+Release through distlock.Client over Redlock on
// five nodes, g goroutines on distinct keys, against the floor: the same
// two redislock scripts (acquire, release) sent by the same rueidis clients
// to the five nodes in parallel. Rounds of the two alternate, so that both
// see the same load on a shared machine. lock/floor-throughput is the
// floor's time over Redlock's: 1 means no overhead. backend-ns/op is
// Redlock's Acquire+Release without distlock's client.
func BenchmarkRedlock(b *testing.B) {
	addrs := addrsOf(nodes(b, 5))
	clients := make([]rueidis.Client, len(addrs))
	for i, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		clients[i] = c
	}
	be, err := redlock.NewRueidis(clients)
	if err != nil {
		b.Fatal(err)
	}
	c := distlock.New(be)
	defer c.Close()
	raw, err := newRawRedlock(clients)
	if err != nil {
		b.Fatal(err)
	}
	floor := func(ctx context.Context, key, token string) error {
		if _, err := raw.lock(ctx, key, token); err != nil {
			return err
		}
		return raw.unlock(ctx, key, token)
	}
	lock := func(ctx context.Context, key, _ string) error {
		l, err := c.Lock(ctx, key)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	direct := func(ctx context.Context, key, token string) error {
		if _, err := be.Acquire(ctx, driver.AcquireRequest{Key: key, Token: token, TTL: distlock.DefaultLease}); err != nil {
			return err
		}
		return be.Release(ctx, key, token)
	}
	for _, g := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("g%d", g), func(b *testing.B) {
			kinds := []struct {
				name      string
				op        func(ctx context.Context, key, token string) error
				wall, cpu time.Duration
			}{{name: "lock", op: lock}, {name: "floor", op: floor}, {name: "backend", op: direct}}
			b.ResetTimer()
			for done := 0; done < b.N; {
				n := min(b.N-done, 50*g)
				for i := range kinds {
					cpu := processCPU(b)
					kinds[i].wall += spread(b, g, n, kinds[i].name, kinds[i].op)
					kinds[i].cpu += processCPU(b) - cpu
				}
				done += n
			}
			for _, k := range kinds {
				b.ReportMetric(float64(k.wall.Nanoseconds())/float64(b.N), k.name+"-ns/op")
				b.ReportMetric(float64(k.cpu.Nanoseconds())/float64(b.N), k.name+"-cpu-ns/op")
			}
			b.ReportMetric(kinds[1].wall.Seconds()/kinds[0].wall.Seconds(), "lock/floor-throughput")
		})
	}
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU(b *testing.B) time.Duration {
	cpu, err := cpuTime()
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}

// spread makes n calls of op over g goroutines, each on a key of its own,
// fails b on an error, and returns the wall time they took.
func spread(b *testing.B, g, n int, kind string, op func(ctx context.Context, key, token string) error) time.Duration {
	ctx := context.Background()
	var (
		next   atomic.Int64
		failed atomic.Pointer[error]
		wg     sync.WaitGroup
	)
	start := time.Now()
	for i := range g {
		key, token := fmt.Sprintf("bench/%s/%s/%d", kind, b.Name(), i), fmt.Sprintf("token-%d", i)
		wg.Go(func() {
			for failed.Load() == nil && next.Add(1) <= int64(n) {
				if err := op(ctx, key, token); err != nil {
					failed.Store(&err)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return took
}
