package redislock_test

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

var (
	// floorReleaseLua is the least a safe release needs: compare the token, delete.
	//
	//go:embed testdata/floor_release.lua
	floorReleaseLua string
	// fencedAcquireLua is the least an acquire needs whose fence never goes
	// back: SET NX PX and the counter advanced to max(last+1, server time).
	//
	//go:embed testdata/floor_fenced_acquire.lua
	fencedAcquireLua string
)

// benchAdapter is one client library: a backend for the distlock client and
// the raw floor with the same client underneath.
type benchAdapter struct {
	name    string
	backend func(b *testing.B) *redislock.Backend
	// floor takes and releases key for token with SET NX PX and the
	// compare-and-delete script.
	floor func(b *testing.B) func(ctx context.Context, key, token string) error
	// fencedFloor does the same with the fenced acquire script instead of
	// SET NX PX.
	fencedFloor func(b *testing.B) func(ctx context.Context, key, token string) error
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
			fencedFloor: func(b *testing.B) func(context.Context, string, string) error {
				c := rueidisClient(b)
				acquire, release := rueidis.NewLuaScript(fencedAcquireLua), rueidis.NewLuaScript(floorReleaseLua)
				return func(ctx context.Context, key, token string) error {
					if err := acquire.Exec(ctx, c, []string{key, key + ":fence"}, []string{token, "30000"}).Error(); err != nil {
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
			fencedFloor: func(b *testing.B) func(context.Context, string, string) error {
				c := goRedisClient(b)
				acquire, release := redis.NewScript(fencedAcquireLua), redis.NewScript(floorReleaseLua)
				return func(ctx context.Context, key, token string) error {
					if err := acquire.Run(ctx, c, []string{key, key + ":fence"}, token, 30000).Err(); err != nil {
						return err
					}
					return release.Run(ctx, c, []string{key}, token).Err()
				}
			},
		},
	}
}

// BenchmarkRedis runs every Redis benchmark against one redis-server. Each
// sub-benchmark alternates, in short rounds, the thing measured with its
// reference, so that both see the same load on a shared machine:
//
//	uncontended/<adapter>/g<N>  Lock+Release through distlock.Client, N goroutines
//	                            on distinct keys, against the raw floor (SET NX PX +
//	                            compare-and-delete script on the same client); in
//	                            between, Backend.Acquire+Release without the client
//	                            (backend-ns/op) splits the gap into store and core,
//	                            and the fenced floor (SET NX PX and a fence counter
//	                            that never goes back, in one script) shows what
//	                            fencing alone costs; <kind>-redis-cpu-ns/op is the
//	                            server's CPU time per operation
//	contended/<adapter>         16 goroutines on one key (Lock waiting, Release,
//	                            1 ms of work), against 1 goroutine uncontended
func BenchmarkRedis(b *testing.B) {
	s := testserver.Redis(b)
	stats := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer stats.Close()
	for _, a := range benchAdapters(s.Addr()) {
		for _, g := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("uncontended/%s/g%d", a.name, g), func(b *testing.B) {
				be := a.backend(b)
				c := distlock.New(be)
				defer c.Close()
				lock := func(ctx context.Context, key, _ string) error {
					l, err := c.Lock(ctx, key)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
				direct := func(ctx context.Context, key, token string) error {
					req := driver.AcquireRequest{Key: key, Token: token, TTL: distlock.DefaultLease}
					if _, err := be.Acquire(ctx, req); err != nil {
						return err
					}
					return be.Release(ctx, key, token)
				}
				kinds := []struct {
					name     string // metric prefix
					op       func(ctx context.Context, key, token string) error
					wall     time.Duration
					redisCPU time.Duration
				}{{name: "lock", op: lock}, {name: "backend", op: direct}, {name: "floor", op: a.floor(b)}, {name: "fenced-floor", op: a.fencedFloor(b)}}
				b.ResetTimer()
				for done := 0; done < b.N; {
					n := min(b.N-done, 50*g)
					for i := range kinds {
						k := &kinds[i]
						cpu := redisCPU(b, stats)
						k.wall += runParallel(b, g, n, k.name, k.op)
						k.redisCPU += redisCPU(b, stats) - cpu
					}
					done += n
				}
				for _, k := range kinds {
					b.ReportMetric(float64(k.wall.Nanoseconds())/float64(b.N), k.name+"-ns/op")
					b.ReportMetric(float64(k.redisCPU.Nanoseconds())/float64(b.N), k.name+"-redis-cpu-ns/op")
				}
				lockTime := kinds[0].wall.Seconds()
				b.ReportMetric(kinds[2].wall.Seconds()/lockTime, "lock/floor-throughput")
				b.ReportMetric(kinds[3].wall.Seconds()/lockTime, "lock/fenced-floor-throughput")
			})
		}
		b.Run("contended/"+a.name, func(b *testing.B) {
			c := distlock.New(a.backend(b))
			defer c.Close()
			contended(b, c, 16, time.Millisecond)
		})
	}
}

// redisCPU returns the CPU time the server has used (user + system).
func redisCPU(b *testing.B, c *redis.Client) time.Duration {
	cpu, err := testserver.RedisCPU(context.Background(), c.Options().Addr)
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}

// runParallel runs n calls of op over g goroutines, each on its own key, and
// returns the wall time they took.
func runParallel(b *testing.B, g, n int, kind string, op func(ctx context.Context, key, token string) error) time.Duration {
	ctx := context.Background()
	return spread(b, g, n, func(i int) func() error {
		key := fmt.Sprintf("bench/%s/%s/%d", kind, b.Name(), i)
		token := fmt.Sprintf("token-%d", i)
		return func() error { return op(ctx, key, token) }
	})
}

// spread runs n calls over g goroutines; goroutine i makes its calls with
// the function that worker(i) returns. It fails b on the first error and
// returns the wall time the calls took.
func spread(b *testing.B, g, n int, worker func(i int) func() error) time.Duration {
	var next atomic.Int64
	errs := make(chan error, g)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range g {
		call := worker(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := call(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return took
}

// contended has g goroutines share one key for b.N acquisitions in all: each
// locks (waiting), releases, then works for work outside the lock. Rounds of
// it alternate with rounds of one goroutine locking another key alone, the
// reference for the rate and the wait.
func contended(b *testing.B, c *distlock.Client, g int, work time.Duration) {
	ctx := context.Background()
	key := "bench/contended/" + b.Name()
	var (
		waits             = make([][]time.Duration, g)
		alone             []time.Duration
		contendedTime     time.Duration
		aloneTime         time.Duration
		contendedAcquired int
	)
	lockRelease := func(key string) (time.Duration, error) {
		t := time.Now()
		l, err := c.Lock(ctx, key, distlock.WithWait(time.Minute))
		if err != nil {
			return 0, err
		}
		waited := time.Since(t)
		return waited, l.Release(ctx)
	}
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 20*g)
		for range max(1, n/g) {
			start := time.Now()
			w, err := lockRelease(key + "/alone")
			if err != nil {
				b.Fatal(err)
			}
			alone = append(alone, w)
			aloneTime += time.Since(start)
		}
		contendedTime += spread(b, g, n, func(i int) func() error {
			return func() error {
				w, err := lockRelease(key)
				if err != nil {
					return err
				}
				waits[i] = append(waits[i], w)
				time.Sleep(work)
				return nil
			}
		})
		contendedAcquired += n
		done += n
	}
	b.StopTimer()
	all := slices.Concat(waits...)
	most := 0
	for _, w := range waits {
		most = max(most, len(w))
	}
	rate := float64(contendedAcquired) / contendedTime.Seconds()
	aloneRate := float64(len(alone)) / aloneTime.Seconds()
	p50alone := percentile(alone, 50)
	b.ReportMetric(rate, "acq/s")
	b.ReportMetric(rate/aloneRate, "acq/s-vs-alone")
	b.ReportMetric(float64(percentile(all, 50).Microseconds()), "p50-wait-µs")
	b.ReportMetric(float64(percentile(all, 99).Microseconds()), "p99-wait-µs")
	b.ReportMetric(float64(percentile(all, 100).Microseconds()), "max-wait-µs")
	b.ReportMetric(float64(p50alone.Microseconds()), "alone-p50-µs")
	b.ReportMetric(float64(percentile(all, 99))/float64(p50alone), "p99-vs-alone-p50")
	b.ReportMetric(float64(most)*float64(g)/float64(len(all)), "max-share/fair")
	quick := 0
	for _, w := range all {
		if w < 3*p50alone {
			quick++
		}
	}
	b.ReportMetric(float64(quick)/float64(len(all)), "share-under-3x-alone-p50")
}

func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}

// BenchmarkList lists a namespace of 1000 held keys: all of it with List,
// and its first page of 100 with ListPage, as the service's List RPC does.
//
//	go test -run '^$' -bench '^BenchmarkList$' -count 3 ./backend/redislock/
func BenchmarkList(b *testing.B) {
	addr := testserver.Redis(b).Addr()
	for _, a := range benchAdapters(addr) {
		b.Run(a.name, func(b *testing.B) {
			c := distlock.New(a.backend(b))
			b.Cleanup(func() { _ = c.Close() })
			ctx := context.Background()
			prefix := fmt.Sprintf("bench-list/%s/", a.name)
			for i := range 1000 {
				if _, err := c.Lock(ctx, fmt.Sprintf("%s%04d", prefix, i), distlock.WithLease(10*time.Minute)); err != nil {
					b.Fatal(err)
				}
			}
			b.Run("List", func(b *testing.B) {
				for b.Loop() {
					if infos, err := c.List(ctx, prefix); err != nil || len(infos) != 1000 {
						b.Fatalf("List = %d holders, %v; want 1000", len(infos), err)
					}
				}
			})
			b.Run("ListPage100", func(b *testing.B) {
				for b.Loop() {
					if infos, err := c.ListPage(ctx, prefix, "", 100); err != nil || len(infos) != 100 {
						b.Fatalf("ListPage = %d holders, %v; want 100", len(infos), err)
					}
				}
			})
		})
	}
}
