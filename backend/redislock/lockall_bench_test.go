package redislock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkLockAll is Client.LockAll and Release of sets of 1, 2 and 4
// keys, one caller, against Lock+Release of one key: the generic form
// costs one acquisition and one release per key.
//
//	go test -run '^$' -bench LockAll -count 3 ./backend/redislock/
func BenchmarkLockAll(b *testing.B) {
	s := testserver.Redis(b)
	c := distlock.New(openURL(b, "redis://"+s.Addr()))
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	b.Run("lock", func(b *testing.B) {
		for b.Loop() {
			l, err := c.Lock(ctx, "bench/one")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 2, 4} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("bench/set/%d", i)
		}
		b.Run(fmt.Sprintf("lockall/keys=%d", n), func(b *testing.B) {
			for b.Loop() {
				set, err := c.LockAll(ctx, keys)
				if err != nil {
					b.Fatal(err)
				}
				if err := set.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
