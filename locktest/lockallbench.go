package locktest

import (
	"context"
	"fmt"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// keyByKey hides every capability of a backend but Backend itself, so that
// a client takes a set of keys one by one: the generic form of LockAll.
type keyByKey struct{ driver.Backend }

// BenchLockAll measures Client.LockAll and LockSet.Release of free sets of
// 2, 4 and 8 keys, one caller, against Lock+Release of one key, on the
// backend newBackend returns: each set at once (driver.MultiAcquirer, if
// the backend has it) and key by key, in the same run.
func BenchLockAll(b *testing.B, newBackend func(testing.TB) driver.Backend) {
	ctx := context.Background()
	atOnce := distlock.New(newBackend(b))
	keyed := distlock.New(keyByKey{newBackend(b)})
	b.Cleanup(func() { _, _ = atOnce.Close(), keyed.Close() })
	b.Run("lock", func(b *testing.B) {
		for b.Loop() {
			l, err := atOnce.Lock(ctx, "bench/one")
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{2, 4, 8} {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("bench/set/%d", i)
		}
		for _, form := range []struct {
			name string
			c    *distlock.Client
		}{{"at-once", atOnce}, {"key-by-key", keyed}} {
			b.Run(fmt.Sprintf("lockall/keys=%d/%s", n, form.name), func(b *testing.B) {
				for b.Loop() {
					set, err := form.c.LockAll(ctx, keys)
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
}
