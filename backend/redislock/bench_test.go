package redislock_test

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/internal/testserver"
)

// floorReleaseLua is the least a safe release needs: compare the token, delete.
//
//go:embed testdata/floor_release.lua
var floorReleaseLua string

// benchAdapter is one client library: a backend for the distlock client and
// the raw floor with the same client underneath.
type benchAdapter struct {
	name    string
	backend func(b *testing.B) *redislock.Backend
	// floor takes and releases key for token with SET NX PX and the
	// compare-and-delete script.
	floor func(b *testing.B) func(ctx context.Context, key, token string) error
}

func benchAdapters(addr string) []benchAdapter {
	goRedisClient := func(b *testing.B) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	rueidisClient := func(b *testing.B) rueidis.Client {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		return c
	}
	mustBackend := func(b *testing.B, be *redislock.Backend, err error) *redislock.Backend {
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = be.Close() })
		return be
	}
	return []benchAdapter{
		{
			name: "rueidis",
			backend: func(b *testing.B) *redislock.Backend {
				be, err := redislock.NewRueidis(rueidisClient(b))
				return mustBackend(b, be, err)
			},
			floor: func(b *testing.B) func(context.Context, string, string) error {
				c, release := rueidisClient(b), rueidis.NewLuaScript(floorReleaseLua)
				return func(ctx context.Context, key, token string) error {
					if err := c.Do(ctx, c.B().Set().Key(key).Value(token).Nx().PxMilliseconds(30000).Build()).Error(); err != nil {
						return err
					}
					return release.Exec(ctx, c, []string{key}, []string{token}).Error()
				}
			},
		},
		{
			name: "go-redis",
			backend: func(b *testing.B) *redislock.Backend {
				be, err := redislock.New(goRedisClient(b))
				return mustBackend(b, be, err)
			},
			floor: func(b *testing.B) func(context.Context, string, string) error {
				c, release := goRedisClient(b), redis.NewScript(floorReleaseLua)
				return func(ctx context.Context, key, token string) error {
					if err := c.SetNX(ctx, key, token, 30*time.Second).Err(); err != nil {
						return err
					}
					return release.Run(ctx, c, []string{key}, token).Err()
				}
			},
		},
	}
}

// benchResults collects ns/op and latency figures across sub-benchmarks for
// the summary that compares them within the run.
type benchResults struct {
	mu sync.Mutex
	m  map[string]float64
}

func (r *benchResults) set(name string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[name] = v
}

func (r *benchResults) get(name string) float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[name]
}

// BenchmarkRedis runs every Redis benchmark against one redis-server:
//
//	lock/<adapter>/g<N>   Lock+Release through distlock.Client, N goroutines on distinct keys
//	floor/<adapter>/g<N>  SET NX PX + compare-and-delete script on the same client
//	contended/<adapter>   16 goroutines on one key: Lock (waiting), Release, 1 ms of work
//
// and logs how each goal fares against the floor of the same run.
func BenchmarkRedis(b *testing.B) {
	s := testserver.Redis(b)
	res := &benchResults{m: make(map[string]float64)}
	concurrency := []int{1, 16, 64}
	for _, a := range benchAdapters(s.Addr()) {
		for _, g := range concurrency {
			b.Run(fmt.Sprintf("lock/%s/g%d", a.name, g), func(b *testing.B) {
				c := distlock.New(a.backend(b))
				defer c.Close()
				lat := runParallel(b, g, "lock", func(ctx context.Context, key, _ string) error {
					l, err := c.Lock(ctx, key)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				})
				res.set(b.Name(), float64(b.Elapsed().Nanoseconds())/float64(b.N))
				if g == 1 {
					res.set("p50/"+a.name, float64(percentile(lat, 50)))
				}
			})
			b.Run(fmt.Sprintf("floor/%s/g%d", a.name, g), func(b *testing.B) {
				runParallel(b, g, "floor", a.floor(b))
				res.set(b.Name(), float64(b.Elapsed().Nanoseconds())/float64(b.N))
			})
		}
		b.Run("contended/"+a.name, func(b *testing.B) {
			c := distlock.New(a.backend(b))
			defer c.Close()
			st := contended(b, c, 16, time.Millisecond)
			res.set(b.Name()+"/acq", st.rate)
			res.set(b.Name()+"/p99", float64(st.p99))
		})
	}
	summarize(b, res, concurrency)
}

// runParallel runs b.N calls of op over g goroutines, each on its own key,
// and returns the latency of every call.
func runParallel(b *testing.B, g int, kind string, op func(ctx context.Context, key, token string) error) []time.Duration {
	ctx := context.Background()
	var next atomic.Int64
	lat := make([][]time.Duration, g)
	errs := make(chan error, g)
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("bench/%s/%s/%d", kind, b.Name(), i)
			token := fmt.Sprintf("token-%d", i)
			for next.Add(1) <= int64(b.N) {
				start := time.Now()
				if err := op(ctx, key, token); err != nil {
					errs <- err
					return
				}
				lat[i] = append(lat[i], time.Since(start))
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return slices.Concat(lat...)
}

type contendedStats struct {
	rate float64
	p99  time.Duration
}

// contended has g goroutines share one key for b.N acquisitions in all: each
// locks (waiting), releases, then works for work outside the lock.
func contended(b *testing.B, c *distlock.Client, g int, work time.Duration) contendedStats {
	ctx := context.Background()
	key := "bench/contended/" + b.Name()
	var next atomic.Int64
	waits := make([][]time.Duration, g)
	errs := make(chan error, g)
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				t := time.Now()
				l, err := c.Lock(ctx, key, distlock.WithWait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				waits[i] = append(waits[i], time.Since(t))
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
				time.Sleep(work)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	all := slices.Concat(waits...)
	most := 0
	for _, w := range waits {
		most = max(most, len(w))
	}
	st := contendedStats{rate: float64(len(all)) / elapsed.Seconds(), p99: percentile(all, 99)}
	b.ReportMetric(st.rate, "acq/s")
	b.ReportMetric(float64(percentile(all, 50).Microseconds()), "p50-wait-µs")
	b.ReportMetric(float64(st.p99.Microseconds()), "p99-wait-µs")
	b.ReportMetric(float64(percentile(all, 100).Microseconds()), "max-wait-µs")
	b.ReportMetric(float64(most)*float64(g)/float64(len(all)), "max-share/fair")
	return st
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// summarize logs each goal with the figures of this run.
func summarize(b *testing.B, res *benchResults, concurrency []int) {
	var sb strings.Builder
	for _, a := range []string{"rueidis", "go-redis"} {
		for _, g := range concurrency {
			lock, floor := res.get(fmt.Sprintf("%s/lock/%s/g%d", b.Name(), a, g)), res.get(fmt.Sprintf("%s/floor/%s/g%d", b.Name(), a, g))
			if lock > 0 && floor > 0 {
				fmt.Fprintf(&sb, "%s g%d: lock %.0f ns/op, floor %.0f ns/op, throughput ratio %.2f (goal >= 0.9)\n", a, g, lock, floor, floor/lock)
			}
		}
		one := res.get(fmt.Sprintf("%s/lock/%s/g1", b.Name(), a))
		acq, p99, p50 := res.get(b.Name()+"/contended/"+a+"/acq"), res.get(b.Name()+"/contended/"+a+"/p99"), res.get("p50/"+a)
		if one > 0 && acq > 0 && p50 > 0 {
			fmt.Fprintf(&sb, "%s contended: %.0f acq/s = %.2fx the uncontended 1-goroutine rate (goal >= 0.5); p99 wait %.1fx the uncontended p50 (goal <= 20)\n",
				a, acq, acq/(1e9/one), p99/p50)
		}
	}
	b.Log("\n" + sb.String())
}
