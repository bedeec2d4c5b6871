package redislock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
)

// BenchmarkReplicaAck compares, on a primary with one replica, for each
// client library with N goroutines on keys of their own, Lock+Release
// through a backend built WithReplicaAck(1, time.Second) with Lock+Release
// through one without, alternating in rounds of 50 operations per
// goroutine so that both see the same load:
//
//	<adapter>/g<N>  ack-ns/op and lock-ns/op, ack/lock, the ratio of their
//	                times, and <kind>-redis-cpu-ns/op, the primary's CPU time
//	                per operation
func BenchmarkReplicaAck(b *testing.B) {
	primary, _ := primaryWithReplica(b)
	addr := primary.Addr()
	stats := redis.NewClient(&redis.Options{Addr: addr})
	defer stats.Close()
	adapters := []struct {
		name string
		new  func(b *testing.B, opts ...redislock.Option) *redislock.Backend
	}{
		{"rueidis", func(b *testing.B, opts ...redislock.Option) *redislock.Backend {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(c.Close)
			be, err := redislock.NewRueidis(c, opts...)
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
		{"go-redis", func(b *testing.B, opts ...redislock.Option) *redislock.Backend {
			c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = c.Close() })
			be, err := redislock.New(c, opts...)
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
	}
	for _, a := range adapters {
		for _, g := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/g%d", a.name, g), func(b *testing.B) {
				lockWith := func(c *distlock.Client) func(ctx context.Context, key, _ string) error {
					return func(ctx context.Context, key, _ string) error {
						l, err := c.Lock(ctx, key)
						if err != nil {
							return err
						}
						return l.Release(ctx)
					}
				}
				acked := distlock.New(a.new(b, redislock.WithReplicaAck(1, time.Second)))
				defer acked.Close()
				plain := distlock.New(a.new(b))
				defer plain.Close()
				ks := []benchKind{{name: "ack", op: lockWith(acked)}, {name: "lock", op: lockWith(plain)}}
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
				for _, k := range ks {
					b.ReportMetric(float64(k.wall.Nanoseconds())/float64(b.N), k.name+"-ns/op")
					b.ReportMetric(float64(k.cpu.Nanoseconds())/float64(b.N), k.name+"-redis-cpu-ns/op")
				}
				b.ReportMetric(ks[0].wall.Seconds()/ks[1].wall.Seconds(), "ack/lock")
			})
		}
	}
}
