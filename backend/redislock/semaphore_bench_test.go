package redislock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkSemaphore compares, on each client library with N goroutines on
// names of their own, Semaphore.Acquire+Release of a permit (of 4) with
// Client.Lock+Release, through the same backend and client, alternating in
// short rounds so that both see the same load:
//
//	<adapter>/g<N>  sem-ns/op and lock-ns/op, and sem/lock, the ratio of
//	                their times
func BenchmarkSemaphore(b *testing.B) {
	s := testserver.Redis(b)
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
				var semTime, lockTime time.Duration
				b.ResetTimer()
				for done := 0; done < b.N; {
					n := min(b.N-done, 50*g)
					semTime += runParallel(b, g, n, "sem", permit)
					lockTime += runParallel(b, g, n, "lock", lock)
					done += n
				}
				b.ReportMetric(float64(semTime.Nanoseconds())/float64(b.N), "sem-ns/op")
				b.ReportMetric(float64(lockTime.Nanoseconds())/float64(b.N), "lock-ns/op")
				b.ReportMetric(semTime.Seconds()/lockTime.Seconds(), "sem/lock")
			})
		}
	}
}
