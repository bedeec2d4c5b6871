package redislock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/distlock/distlock"
)

// BenchmarkRWLock compares, on each client library with N goroutines on
// names of their own, a read hold (RWMutex.RLock+Release) and a write hold
// (RWMutex.Lock+Release) with Client.Lock+Release (see benchBesideLock:
// metrics read-ns/op, write-ns/op, lock-ns/op, read/lock, write/lock and
// the server's CPU time per operation).
func BenchmarkRWLock(b *testing.B) {
	benchBesideLock(b, func(c *distlock.Client) []benchKind {
		var rws sync.Map // name → *distlock.RWMutex
		hold := func(write bool) func(ctx context.Context, name, _ string) error {
			return func(ctx context.Context, name, _ string) error {
				rw, ok := rws.Load(name)
				if !ok {
					m, err := c.RWMutex(name)
					if err != nil {
						return err
					}
					rw = m
					rws.Store(name, m)
				}
				m := rw.(*distlock.RWMutex)
				lock := m.RLock
				if write {
					lock = m.Lock
				}
				l, err := lock(ctx)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}
		}
		return []benchKind{{name: "read", op: hold(false)}, {name: "write", op: hold(true)}}
	})
}
