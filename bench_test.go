package distlock_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
)

// BenchmarkCoreOverhead measures the client's own cost per TryLock+Release
// against memlock's raw Acquire+Release, the floor of an in-process store.
func BenchmarkCoreOverhead(b *testing.B) {
	ctx := context.Background()
	b.Run("raw-memlock", func(b *testing.B) {
		store := memlock.New()
		b.ReportAllocs()
		for b.Loop() {
			req := distlock.AcquireRequest{Key: "k", Token: "t", TTL: distlock.DefaultLease}
			if _, err := store.Acquire(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := store.Release(ctx, "k", "t"); err != nil {
				b.Fatal(err)
			}
		}
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
