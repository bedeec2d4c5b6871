package occ

import (
	"context"
	"fmt"
	"sync"
)

// Value is an in-memory value with a version that grows with every change:
// optimistic concurrency inside one process. The zero value holds T's zero
// value at version 0. It is safe for concurrent use.
type Value[T any] struct {
	mu      sync.Mutex
	v       T
	version uint64
}

// Load returns the value and its version.
func (v *Value[T]) Load() (T, uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.v, v.version
}

// CompareAndSwap stores next if the version is still version, and returns
// the new version; otherwise it changes nothing and returns an error
// matching ErrConflict.
func (v *Value[T]) CompareAndSwap(version uint64, next T) (uint64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.version != version {
		return v.version, fmt.Errorf("occ: compare and swap at version %d: %w: now at %d", version, ErrConflict, v.version)
	}
	v.v = next
	v.version++
	return v.version, nil
}

// Update applies f to the current value and stores the result if nothing
// changed meanwhile, retrying conflicts under p. f may run several times and
// must not have side effects; an error from f stops Update.
func Update[T any](ctx context.Context, p Policy, v *Value[T], f func(T) (T, error)) error {
	return Retry(ctx, p, func(context.Context) error {
		cur, version := v.Load()
		next, err := f(cur)
		if err != nil {
			return err
		}
		_, err = v.CompareAndSwap(version, next)
		return err
	})
}
