package etcdlock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkSyncPrimitives compares, uncontended and in alternating rounds
// through one client, a semaphore's Acquire+Release and a read-write
// lock's RLock+Release and Lock+Release with a lock's Lock+Release, the
// reference: "lock/semaphore" is the semaphore's throughput relative to
// the lock's. "serial" measures latency, "parallel" throughput, each
// goroutine on a name of its own.
func BenchmarkSyncPrimitives(b *testing.B) {
	for _, srv := range servers {
		b.Run(srv.name, func(b *testing.B) {
			eps := srv.start(b)
			c := distlock.New(dial(b, eps, uniquePrefix(b)))
			b.Cleanup(func() { _ = c.Close() })
			sems := handles(func(name string) (*distlock.Semaphore, error) { return c.Semaphore(name, 4) })
			rws := handles(c.RWMutex)
			lock := locktest.Op{Name: "lock", Do: func(ctx context.Context, key string) error {
				l, err := c.Lock(ctx, key)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}}
			sem := locktest.Op{Name: "semaphore", Do: func(ctx context.Context, key string) error {
				s, err := sems(key)
				if err != nil {
					return err
				}
				p, err := s.Acquire(ctx)
				if err != nil {
					return err
				}
				return p.Release(ctx)
			}}
			hold := func(name string, take func(*distlock.RWMutex, context.Context, ...distlock.Option) (*distlock.Lock, error)) locktest.Op {
				return locktest.Op{Name: name, Do: func(ctx context.Context, key string) error {
					m, err := rws(key)
					if err != nil {
						return err
					}
					l, err := take(m, ctx)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}}
			}
			rlock, wlock := hold("rlock", (*distlock.RWMutex).RLock), hold("wlock", (*distlock.RWMutex).Lock)
			for _, mode := range []string{"serial", "parallel"} {
				b.Run(mode, func(b *testing.B) { locktest.Compare(b, mode, lock, sem, rlock, wlock) })
			}
		})
	}
}

// handles returns a function that makes one handle per name with open and
// then returns it again; the client closes them.
func handles[H any](open func(string) (H, error)) func(string) (H, error) {
	var (
		mu  sync.Mutex
		byN = make(map[string]H)
	)
	return func(name string) (H, error) {
		mu.Lock()
		defer mu.Unlock()
		if h, ok := byN[name]; ok {
			return h, nil
		}
		h, err := open(name)
		if err == nil {
			byN[name] = h
		}
		return h, err
	}
}
