package stampede_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/stampede"
)

// runs numbers the benchmark runs sharing one server (-count), so that each
// uses keys of its own.
var runs atomic.Int64

// BenchmarkHit compares a fresh hit through Get with a plain GET of the same
// value, over the same Redis, interleaved call by call so that a shared
// machine's swings hit both alike. It reports each one's time per call and
// their ratio; ns/op is the pair.
func BenchmarkHit(b *testing.B) {
	ctx := context.Background()
	rds := testserver.Redis(b)
	rc := redis.NewClient(&redis.Options{Addr: rds.Addr()})
	b.Cleanup(func() { rc.Close() })
	client, err := distlock.Open(ctx, "redis://"+rds.Addr())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	cache := newCache(b, client, newRedisStore(b, rds.Addr()))
	value := []byte("a cached value of about sixty bytes, as a small JSON object is")
	load := func(context.Context) ([]byte, error) { return value, nil }
	key := "hot-" + strconv.FormatInt(runs.Add(1), 10)
	if err := rc.Set(ctx, key, value, 0).Err(); err != nil {
		b.Fatal(err)
	}
	if _, err := cache.Get(ctx, key, load); err != nil {
		b.Fatal(err)
	}
	var plain, hit time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, err := rc.Get(ctx, key).Bytes(); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := cache.Get(ctx, key, load); err != nil {
			b.Fatal(err)
		}
		plain, hit = plain+t1.Sub(t0), hit+time.Since(t1)
	}
	if s := cache.Stats(); s.Loads != 1 {
		b.Fatalf("%d loads; want 1", s.Loads)
	}
	n := float64(b.N)
	b.ReportMetric(float64(plain.Nanoseconds())/n, "GET-ns/op")
	b.ReportMetric(float64(hit.Nanoseconds())/n, "hit-ns/op")
	b.ReportMetric(float64(hit)/float64(plain), "hit/GET")
}

// BenchmarkMiss64: each op is a miss of a new key by 64 concurrent callers
// over two replicas (clients); it reports loads per miss and the time until
// all 64 have the value.
func BenchmarkMiss64(b *testing.B) {
	ctx := context.Background()
	rds := testserver.Redis(b)
	for _, s := range []struct {
		name, url string
		store     func() stampede.Store
	}{
		{"mem", "mem://" + b.Name(), func() stampede.Store { return stampede.NewMemoryStore() }},
		{"redis", "redis://" + rds.Addr(), func() stampede.Store { return newRedisStore(b, rds.Addr()) }},
	} {
		b.Run(s.name, func(b *testing.B) {
			store := s.store()
			var caches [2]*stampede.Cache
			for i := range caches {
				client, err := distlock.Open(ctx, s.url)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { client.Close() })
				caches[i] = newCache(b, client, store)
			}
			var loads atomic.Int64
			load := func(context.Context) ([]byte, error) {
				loads.Add(1)
				return []byte("value"), nil
			}
			var failed atomic.Int64
			n, run := 0, strconv.FormatInt(runs.Add(1), 10)
			for b.Loop() {
				n++
				key := "miss-" + run + "-" + strconv.Itoa(n)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for i := range 64 {
					wg.Go(func() {
						<-start
						if _, err := caches[i%2].Get(ctx, key, load); err != nil {
							failed.Add(1)
						}
					})
				}
				close(start)
				wg.Wait()
			}
			if failed.Load() > 0 {
				b.Fatalf("%d calls failed", failed.Load())
			}
			b.ReportMetric(float64(loads.Load())/float64(n), "loads/miss")
		})
	}
}
