package distlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// MaxLockAllKeys is the most keys one LockAll takes.
const MaxLockAllKeys = 64

// LockSet is keys held together, taken by LockAll, LockPath or RLockPath:
// each key is a Lock of its own (its own token, fence and watchdog, on the
// set's options), and the set is lost as soon as any of them is.
type LockSet struct {
	locks   []*Lock // in the order taken
	closers []func() error
	nested  bool // LockPath's: released leaf first, one by one
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stops   []func() bool

	mu       sync.Mutex
	released bool
}

// LockAll acquires every one of keys, or none. It tries them one by one in
// the byte order of their names, whatever order keys names them in, each
// without waiting. At the first held key it releases the keys it took
// after that key and waits for it holding those before it, for a short
// jittered time (holdingWait); if the key is still held then, it releases
// every key and waits for that key alone. Then it tries the rest again.
// A caller that holds keys only waits for a key after all of them, and only
// for a bounded time, so callers whose sets overlap never wait on each
// other in a cycle, and a key waited for is usually kept, so sets complete
// even where every key has waiters queued (etcd refuses a try then). On
// stores that pin a connection per held lock (pglock, mysqllock) a caller
// pins one per key it holds while it waits holding them, and one once it
// waits alone; a pool exhausted by held locks thus frees itself within
// holdingWait. A key whose try failed (not held elsewhere) is waited for
// holding nothing. opts apply to every key; WithWait bounds the whole
// acquisition, not each key. If a key stays held past the wait or ctx, the
// keys taken are released and LockAll returns that key's error, matching
// ErrNotAcquired. keys must be 1 to MaxLockAllKeys keys without repeats
// (else ErrInvalidOption), each valid (else ErrInvalidKey); nothing is
// taken otherwise.
//
// On a backend that takes a set of keys at once (driver.MultiAcquirer:
// redislock, etcdlock, memlock) each try of the keys not yet held is one
// request, all or none; elsewhere it is one acquisition per key, in
// sequence. Either way a held key met costs one more acquisition, its
// wait.
func (c *Client) LockAll(ctx context.Context, keys []string, opts ...Option) (*LockSet, error) {
	sorted, err := lockAllKeys(keys)
	if err != nil {
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
	held := make(map[string]*Lock, len(sorted))
	for {
		busy, err := c.tryAll(ctx, sorted, held, opts)
		if busy == "" {
			break // taken them all
		}
		if err != nil && len(held) == 0 {
			return nil, err
		}
		l, err := c.waitForKey(ctx, sorted, held, busy, err != nil, deadline, opts)
		if err != nil {
			return nil, err
		}
		held[busy] = l
	}
	locks := make([]*Lock, 0, len(sorted))
	for _, k := range sorted {
		locks = append(locks, held[k])
	}
	return newLockSet(locks, false, nil), nil
}

// holdingWait is the shortest time LockAll waits for a held key while it
// holds the keys before it; each such wait adds a random part of as much
// again, so that callers cut at once do not meet again at once.
const holdingWait = 250 * time.Millisecond

// waitForKey waits for busy, a key of sorted held elsewhere (or whose try
// failed: tryFailed), within deadline if it is not zero. It first releases
// the keys of held after busy and waits up to holdingWait (jittered)
// holding those before it; if busy is still not taken, or its try failed,
// it releases every key and waits holding nothing. It returns busy's lock;
// on error held is empty.
func (c *Client) waitForKey(ctx context.Context, sorted []string, held map[string]*Lock, busy string, tryFailed bool, deadline time.Time, opts []Option) (*Lock, error) {
	waitUntil := func(until time.Time) []Option {
		if until.IsZero() {
			return opts
		}
		return append(slices.Clip(opts), WithWait(max(time.Until(until), 0)))
	}
	if err := releaseHeld(ctx, sorted, held, busy); err != nil {
		return nil, errors.Join(err, releaseHeld(ctx, sorted, held, ""))
	}
	if !tryFailed && len(held) > 0 {
		until := time.Now().Add(holdingWait + rand.N(holdingWait))
		if !deadline.IsZero() && deadline.Before(until) {
			until = deadline
		}
		l, err := c.Lock(ctx, busy, waitUntil(until)...)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil || until.Equal(deadline) {
			return nil, errors.Join(err, releaseHeld(ctx, sorted, held, ""))
		}
	}
	if err := releaseHeld(ctx, sorted, held, ""); err != nil {
		return nil, err
	}
	return c.Lock(ctx, busy, waitUntil(deadline)...)
}

// newLockSet returns the set of locks, lost as soon as any of them is;
// closers run once its locks are released. The locks of a nested set
// (a path) are released in the reverse of their order, one by one; the
// others all at once.
func newLockSet(locks []*Lock, nested bool, closers []func() error) *LockSet {
	s := &LockSet{locks: locks, nested: nested, closers: closers}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	for _, l := range s.locks {
		s.stops = append(s.stops, context.AfterFunc(l.Context(), func() { s.cancel(l.Err()) }))
	}
	return s
}

// tryAll tries each of sorted not in held, without waiting, and adds what
// it takes to held: in one request where the backend takes sets at once
// (tryAtOnce), else in order, one by one. It returns the first key that is held
// elsewhere, or whose try failed (with the error), or "" once it holds them
// all.
func (c *Client) tryAll(ctx context.Context, sorted []string, held map[string]*Lock, opts []Option) (string, error) {
	if m, ok := c.backend.(driver.MultiAcquirer); ok {
		if busy, tried, err := c.tryAtOnce(ctx, m, sorted, held, opts); tried {
			return busy, err
		}
	}
	for _, k := range sorted {
		if held[k] != nil {
			continue
		}
		l, err := c.TryLock(ctx, k, opts...)
		switch {
		case errors.Is(err, ErrNotAcquired):
			return k, nil
		case err != nil:
			return k, err
		}
		held[k] = l
	}
	return "", nil
}

// releaseHeld releases the keys of held that come after keep in sorted
// (byte) order, all of them if keep is "", in reverse key order, and drops
// them from held, within ReleaseBudget even if ctx has ended.
func releaseHeld(ctx context.Context, sorted []string, held map[string]*Lock, keep string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseBudget)
	defer cancel()
	var errs []error
	for _, k := range slices.Backward(sorted) {
		if l := held[k]; l != nil && (keep == "" || k > keep) {
			errs = append(errs, l.Release(ctx))
			delete(held, k)
		}
	}
	return errors.Join(errs...)
}

// lockAllKeys checks keys and returns them sorted.
func lockAllKeys(keys []string) ([]string, error) {
	if len(keys) == 0 || len(keys) > MaxLockAllKeys {
		return nil, fmt.Errorf("%w: lock all: %d keys, want 1 to %d", ErrInvalidOption, len(keys), MaxLockAllKeys)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i, k := range sorted {
		if err := ValidateKey(k); err != nil {
			return nil, keyErr("lock all", k, err)
		}
		if i > 0 && sorted[i-1] == k {
			return nil, keyErr("lock all", k, fmt.Errorf("%w: the key is named twice", ErrInvalidOption))
		}
	}
	return sorted, nil
}

// Locks returns the set's locks in the order they were taken: sorted by
// key for LockAll, from the root for LockPath.
func (s *LockSet) Locks() []*Lock { return slices.Clone(s.locks) }

// Fence returns the fence of key's lock, and false if key is not in the
// set.
func (s *LockSet) Fence(key string) (uint64, bool) {
	i := slices.IndexFunc(s.locks, func(l *Lock) bool { return l.Key() == key })
	if i < 0 {
		return 0, false
	}
	return s.locks[i].Fence(), true
}

// Done returns a channel that is closed once any lock of the set is lost,
// or the set is released.
func (s *LockSet) Done() <-chan struct{} { return s.ctx.Done() }

// Context returns a context that ends as Done does; context.Cause gives
// the error of the lock that ended it.
func (s *LockSet) Context() context.Context { return s.ctx }

// Err returns nil while every lock of the set is held, else the error of
// the first that is not (see Lock.Err), checked in the order of Locks.
func (s *LockSet) Err() error {
	for _, l := range s.locks {
		if err := l.Err(); err != nil {
			return err
		}
	}
	return nil
}

// Release releases every lock of the set and returns their errors joined:
// a LockAll set's all at once, a path's one by one from its leaf (so that
// no lock of a node is held without the locks of the nodes above it).
// Releasing twice returns an error matching ErrNotHeld.
func (s *LockSet) Release(ctx context.Context) error {
	s.mu.Lock()
	again := s.released
	s.released = true
	s.mu.Unlock()
	if again {
		return fmt.Errorf("%w: lock set already released", ErrNotHeld)
	}
	for _, stop := range s.stops {
		stop()
	}
	errs := make([]error, len(s.locks))
	if s.nested {
		for i, l := range slices.Backward(s.locks) {
			errs[i] = l.Release(ctx)
		}
	} else {
		var wg sync.WaitGroup
		for i, l := range s.locks {
			wg.Go(func() { errs[i] = l.Release(ctx) })
		}
		wg.Wait()
	}
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	s.cancel(fmt.Errorf("%w: lock set released", ErrNotHeld))
	return errors.Join(errs...)
}
