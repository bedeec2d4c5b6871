package distlock

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// MaxPathDepth is the most nodes a path of LockPath or RLockPath names.
const MaxPathDepth = 16

// LockPath takes the last node of path alone, in a tree of names: a
// hierarchical lock. path names the node's ancestors first, from the root:
// a table, then one of its rows ({"orders", "orders/42"}). Each ancestor
// is taken as a reader of its read-write lock (an intention: a node below
// it is in use) and the node as the writer of its own. So a lock of a
// table excludes every lock of its rows, waits for those held to end and
// keeps new ones out meanwhile, while locks of different rows run side by
// side and two of one row exclude each other.
//
// A name must have the same ancestors in every path that names it: two
// callers whose paths order two names differently can wait on each other
// until their waits end. Nodes are taken from the root down, each held
// while the next is waited for; WithWait bounds the whole acquisition, and
// on failure what was taken is released. The backend must keep read-write
// locks (errors.ErrUnsupported otherwise). path must have 1 to
// MaxPathDepth names without repeats (ErrInvalidOption), each a valid key
// (ErrInvalidKey).
//
// The set is lost as soon as any of its holds is; Fence(name) gives each
// node's fence, the node's own fence being the one to give the resource.
func (c *Client) LockPath(ctx context.Context, path []string, opts ...Option) (*LockSet, error) {
	return c.lockPath(ctx, path, true, opts)
}

// RLockPath is LockPath with the last node taken as a reader: readers of a
// node share it and exclude its writers and those of its ancestors. A
// reader of an inner node does not exclude writers below it (they too are
// readers of it): to read a whole table while no row changes, take the
// table with LockPath.
func (c *Client) RLockPath(ctx context.Context, path []string, opts ...Option) (*LockSet, error) {
	return c.lockPath(ctx, path, false, opts)
}

// lockPath takes path's ancestors as a reader and its last node as a
// writer if write, else as a reader.
func (c *Client) lockPath(ctx context.Context, path []string, write bool, opts []Option) (*LockSet, error) {
	if err := checkPath(path); err != nil {
		return nil, err
	}
	r := Request{Wait: WaitUntilContextDone}
	for _, o := range opts {
		o(&r)
	}
	var deadline time.Time
	if r.Wait >= 0 {
		deadline = time.Now().Add(r.Wait)
	}
	var (
		locks   []*Lock
		closers []func() error
	)
	fail := func(err error) (*LockSet, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseBudget)
		defer cancel()
		for _, l := range slices.Backward(locks) {
			_ = l.Release(rctx)
		}
		for _, closeHandle := range closers {
			_ = closeHandle()
		}
		return nil, err
	}
	for i, name := range path {
		m, err := c.RWMutex(name)
		if err != nil {
			return fail(err)
		}
		closers = append(closers, m.Close)
		nodeOpts := opts
		if !deadline.IsZero() {
			nodeOpts = append(slices.Clip(opts), WithWait(max(time.Until(deadline), 0)))
		}
		var l *Lock
		if write && i == len(path)-1 {
			l, err = m.Lock(ctx, nodeOpts...)
		} else {
			l, err = m.RLock(ctx, nodeOpts...)
		}
		if err != nil {
			return fail(err)
		}
		locks = append(locks, l)
	}
	return newLockSet(locks, true, closers), nil
}

// checkPath checks a path of LockPath.
func checkPath(path []string) error {
	if len(path) == 0 || len(path) > MaxPathDepth {
		return fmt.Errorf("%w: lock path: %d names, want 1 to %d", ErrInvalidOption, len(path), MaxPathDepth)
	}
	for i, name := range path {
		if err := ValidateKey(name); err != nil {
			return keyErr("lock path", name, err)
		}
		if slices.Contains(path[:i], name) {
			return keyErr("lock path", name, fmt.Errorf("%w: the name is in the path twice", ErrInvalidOption))
		}
	}
	return nil
}
