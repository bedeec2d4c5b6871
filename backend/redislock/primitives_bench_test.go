package redislock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// BenchmarkPrimitives sets the forms that span holds against the
// single-key form they build on, one caller unless named: Lock+Release of
// one key (lock); LockPath of a row (a read hold of its table and the row's
// lock) and Release (path), and the same from 16 callers on 16 rows of one
// table (path/callers=16, against lock/callers=16 on 16 keys); a write hold
// downgraded to a read hold and released (downgrade), against a write hold
// released and a read hold taken (release+rlock), which lets a writer in
// between; AcquireN of 3 of 8 permits and Release (acquire-n=3), against
// one permit (acquire).
//
//	go test -run '^$' -bench Primitives -count 3 ./backend/redislock/
func BenchmarkPrimitives(b *testing.B) {
	s := testserver.Redis(b)
	c := distlock.New(openURL(b, "redis://"+s.Addr()))
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	run := func(name string, callers int, cycle func(caller int) error) {
		b.Run(fmt.Sprintf("%s/callers=%d", name, callers), func(b *testing.B) {
			var wg sync.WaitGroup
			per := b.N/callers + 1
			b.ResetTimer()
			for i := range callers {
				wg.Go(func() {
					for range per {
						if err := cycle(i); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
	release := func(l interface{ Release(context.Context) error }, err error) error {
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	for _, callers := range []int{1, 16} {
		run("lock", callers, func(i int) error {
			return release(c.Lock(ctx, fmt.Sprintf("bench/lock/%d", i)))
		})
		run("path", callers, func(i int) error {
			return release(c.LockPath(ctx, []string{"bench/table", fmt.Sprintf("bench/table/%d", i)}))
		})
	}
	rw, err := c.RWMutex("bench/rw")
	if err != nil {
		b.Fatal(err)
	}
	run("downgrade", 1, func(int) error {
		w, err := rw.Lock(ctx)
		if err != nil {
			return err
		}
		if err := rw.Downgrade(ctx, w); err != nil {
			return err
		}
		return w.Release(ctx)
	})
	run("release+rlock", 1, func(int) error {
		if err := release(rw.Lock(ctx)); err != nil {
			return err
		}
		return release(rw.RLock(ctx))
	})
	sem, err := c.Semaphore("bench/sem", 8)
	if err != nil {
		b.Fatal(err)
	}
	run("acquire", 1, func(int) error { return release(sem.Acquire(ctx)) })
	run("acquire-n=3", 1, func(int) error { return release(sem.AcquireN(ctx, 3)) })
}
