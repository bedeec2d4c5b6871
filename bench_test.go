package distlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
)

// BenchmarkCoreOverhead measures the client's own cost per TryLock+Release
// against memlock's raw Acquire+Release, the floor of an in-process store.
func BenchmarkCoreOverhead(b *testing.B) {
	ctx := context.Background()
	b.Run("raw-memlock", func(b *testing.B) {
		store := memlock.New()
		b.ReportAllocs()
		for b.Loop() {
			req := driver.AcquireRequest{Key: "k", Token: "t", TTL: distlock.DefaultLease}
			if _, err := store.Acquire(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := store.Release(ctx, "k", "t"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client-memlock-parallel", func(b *testing.B) {
		c := distlock.New(memlock.New())
		defer c.Close()
		var n atomic.Int64
		b.SetParallelism(32) // distinct keys, as many goroutines as a busy service has
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			key := fmt.Sprint("k", n.Add(1))
			for pb.Next() {
				l, err := c.Lock(ctx, key)
				if err != nil {
					b.Error(err)
					return
				}
				if err := l.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("client-memlock", func(b *testing.B) {
		c := distlock.New(memlock.New())
		defer c.Close()
		b.ReportAllocs()
		for b.Loop() {
			l, err := c.TryLock(ctx, "k")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
