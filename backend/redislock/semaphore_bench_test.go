package redislock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkSemaphore compares, on each client library with N goroutines on
// names of their own, Semaphore.Acquire+Release of a permit (of 4) with
// Client.Lock+Release (see benchBesideLock: metrics sem-ns/op, lock-ns/op,
// sem/lock and the server's CPU time per operation).
func BenchmarkSemaphore(b *testing.B) {
	benchBesideLock(b, func(c *distlock.Client) []benchKind {
		var sems sync.Map // name → *distlock.Semaphore
		return []benchKind{{name: "sem", op: func(ctx context.Context, name, _ string) error {
			sem, ok := sems.Load(name)
			if !ok {
				h, err := c.Semaphore(name, 4)
				if err != nil {
					return err
				}
				sem = h
				sems.Store(name, h)
			}
			p, err := sem.(*distlock.Semaphore).Acquire(ctx)
			if err != nil {
				return err
			}
			return p.Release(ctx)
		}}}
	})
}

// benchKind is one kind of operation that benchBesideLock times.
type benchKind struct {
	name      string // metric prefix
	op        func(ctx context.Context, key, token string) error
	wall, cpu time.Duration
}

// benchBesideLock compares, on each client library with N goroutines on
// names of their own, the operations kinds(c) makes over a client c with
// Client.Lock+Release through the same backend and client, alternating in
// short rounds so that all see the same load:
//
//	<adapter>/g<N>  <kind>-ns/op and lock-ns/op, <kind>/lock, the ratio of
//	                their times, and <kind>-redis-cpu-ns/op, the server's CPU
//	                time per operation
func benchBesideLock(b *testing.B, kinds func(c *distlock.Client) []benchKind) {
	s := testserver.Redis(b)
	stats := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer stats.Close()
	for _, a := range benchAdapters(s.Addr()) {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/g%d", a.name, g), func(b *testing.B) {
				c := distlock.New(a.backend(b))
				defer c.Close()
				lock := func(ctx context.Context, key, _ string) error {
					l, err := c.Lock(ctx, key)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
				ks := append(kinds(c), benchKind{name: "lock", op: lock})
				b.ResetTimer()
				for done := 0; done < b.N; {
					n := min(b.N-done, 50*g)
					for i := range ks {
						k := &ks[i]
						cpu := redisCPU(b, stats)
						k.wall += runParallel(b, g, n, k.name, k.op)
						k.cpu += redisCPU(b, stats) - cpu
					}
					done += n
				}
				last := ks[len(ks)-1]
				for _, k := range ks {
					b.ReportMetric(float64(k.wall.Nanoseconds())/float64(b.N), k.name+"-ns/op")
					b.ReportMetric(float64(k.cpu.Nanoseconds())/float64(b.N), k.name+"-redis-cpu-ns/op")
					if k.name != last.name {
						b.ReportMetric(k.wall.Seconds()/last.wall.Seconds(), k.name+"/lock")
					}
				}
			})
		}
	}
}
