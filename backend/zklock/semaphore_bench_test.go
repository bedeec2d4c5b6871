package zklock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkSemaphoreAndRWLock compares, in alternating rounds, the
// uncontended Lock+Release of a key with Acquire+Release of a permit of a
// 4-permit semaphore and RLock+Release of a read-write lock, each caller on
// a name of its own. "lock/semaphore" and "lock/rlock" are their
// throughputs relative to the lock's.
func BenchmarkSemaphoreAndRWLock(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	c := distlock.New(dial(b, srv.Addr(), uniqueRoot(b)))
	b.Cleanup(func() { _ = c.Close() }) // closes the handles too
	var mu sync.Mutex
	sems := map[string]*distlock.Semaphore{}
	rws := map[string]*distlock.RWMutex{}
	handle := func(key string, sem bool) (*distlock.Semaphore, *distlock.RWMutex, error) {
		mu.Lock()
		defer mu.Unlock()
		var err error
		if sem && sems[key] == nil {
			sems[key], err = c.Semaphore(key, 4)
		} else if !sem && rws[key] == nil {
			rws[key], err = c.RWMutex(key)
		}
		return sems[key], rws[key], err
	}
	lock := locktest.Op{Name: "lock", Do: func(ctx context.Context, key string) error {
		l, err := c.Lock(ctx, key)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
	sem := locktest.Op{Name: "semaphore", Do: func(ctx context.Context, key string) error {
		s, _, err := handle(key, true)
		if err != nil {
			return err
		}
		l, err := s.Acquire(ctx)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
	rlock := locktest.Op{Name: "rlock", Do: func(ctx context.Context, key string) error {
		_, m, err := handle(key, false)
		if err != nil {
			return err
		}
		l, err := m.RLock(ctx)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) { locktest.Compare(b, mode, lock, sem, rlock) })
	}
}
