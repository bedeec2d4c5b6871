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
// Client.Lock+Release, through the same backend and client, alternating in
// short rounds so that both see the same load:
//
//	<adapter>/g<N>  sem-ns/op and lock-ns/op, sem/lock, the ratio of their
//	                times, and <kind>-redis-cpu-ns/op, the server's CPU time
//	                per operation
func BenchmarkSemaphore(b *testing.B) {
	s := testserver.Redis(b)
	stats := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer stats.Close()
	for _, a := range benchAdapters(s.Addr()) {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/g%d", a.name, g), func(b *testing.B) {
				c := distlock.New(a.backend(b))
				defer c.Close()
				var sems sync.Map // name → *distlock.Semaphore
				permit := func(ctx context.Context, name, _ string) error {
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
				}
				lock := func(ctx context.Context, key, _ string) error {
					l, err := c.Lock(ctx, key)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
				kinds := []struct {
					name      string // metric prefix
					op        func(ctx context.Context, key, token string) error
					wall, cpu time.Duration
				}{{name: "sem", op: permit}, {name: "lock", op: lock}}
				b.ResetTimer()
				for done := 0; done < b.N; {
					n := min(b.N-done, 50*g)
					for i := range kinds {
						k := &kinds[i]
						cpu := redisCPU(b, stats)
						k.wall += runParallel(b, g, n, k.name, k.op)
						k.cpu += redisCPU(b, stats) - cpu
					}
					done += n
				}
				for _, k := range kinds {
					b.ReportMetric(float64(k.wall.Nanoseconds())/float64(b.N), k.name+"-ns/op")
					b.ReportMetric(float64(k.cpu.Nanoseconds())/float64(b.N), k.name+"-redis-cpu-ns/op")
				}
				b.ReportMetric(kinds[0].wall.Seconds()/kinds[1].wall.Seconds(), "sem/lock")
			})
		}
	}
}
