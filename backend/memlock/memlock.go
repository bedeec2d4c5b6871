// Package memlock is an in-process distlock backend: real leases that expire
// by time, a fencing counter, and channel notification for waiters. It is the
// reference for distlock's semantics, serves single-process applications, and
// makes unit tests fast. Locks live in the memory of one process: two
// processes never exclude each other through it.
//
// New makes a store and returns a handle on it; Connect returns another handle
// on the same store, as a second connection to a server would be. Closing a
// handle leaves the store and its other handles alone; every call on a closed
// handle returns an error matching driver.ErrClosed.
//
// Open, and distlock.Open through the scheme "mem", take a URL: "mem://"
// builds a fresh store each time, "mem://NAME" connects to the
// process-wide store of that name, so that several clients can share it.
// A mem:// URL takes no credentials and no parameter. New takes no option:
// a store has nothing to configure.
package memlock

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// Backend is a handle on an in-memory lock store. The zero value is not
// usable; call New.
type Backend struct {
	*store
	closed atomic.Bool
}

// store is the state that the handles share.
type store struct {
	mu       sync.Mutex
	locks    map[string]*entry
	fence    uint64 // one counter for all keys: strictly increasing per key too
	watchers map[string]map[chan struct{}]struct{}
	sweepAt  int
	sems     map[string]*semaphore // semaphore.go
	rws      map[string]*rwLock    // rwlock.go
}

type entry struct {
	token   string
	fence   uint64
	expires time.Time
	meta    driver.Meta
	permits int // a semaphore's hold: the permits it counts (0 for a lock)

	requested context.Context         // the grant's Requested
	ask       context.CancelCauseFunc // ends requested with a *driver.ReleaseRequest
}

// newEntry is a fresh grant of fence to req.
func newEntry(req driver.AcquireRequest, fence uint64, now time.Time) *entry {
	e := &entry{token: req.Token, fence: fence, expires: now.Add(req.TTL), meta: req.Meta}
	e.requested, e.ask = context.WithCancelCause(context.Background())
	return e
}

// grant is the driver's view of e.
func (e *entry) grant() driver.Grant { return driver.Grant{Fence: e.fence, Requested: e.requested} }

var (
	_ driver.Backend    = (*Backend)(nil)
	_ driver.Notifier   = (*Backend)(nil)
	_ driver.Lister     = (*Backend)(nil)
	_ driver.PageLister = (*Backend)(nil)
	_ driver.Namer      = (*Backend)(nil)
	_ driver.Handoff    = (*Backend)(nil)

	_ driver.ForceReleaser    = (*Backend)(nil)
	_ driver.ReleaseRequester = (*Backend)(nil)
)

// New returns a handle on a new, empty store.
func New() *Backend {
	return &Backend{store: &store{locks: make(map[string]*entry), watchers: make(map[string]map[chan struct{}]struct{}), sweepAt: 1024,
		sems: make(map[string]*semaphore), rws: make(map[string]*rwLock)}}
}

// Connect returns a new handle on b's store.
func (b *Backend) Connect() *Backend { return &Backend{store: b.store} }

// check returns the error for a call on a closed handle or with a done ctx.
func (b *Backend) check(ctx context.Context) error {
	if b.closed.Load() {
		return driver.ErrClosed
	}
	return ctx.Err()
}

// Name returns "mem".
func (b *Backend) Name() string { return "mem" }

// live returns key's entry if it has not expired, dropping it if it has.
func (b *store) live(key string, now time.Time) *entry {
	e := b.locks[key]
	if e != nil && !now.Before(e.expires) {
		delete(b.locks, key)
		return nil
	}
	return e
}

// Acquire takes key for req.Token if it is free or its lease has expired.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.check(ctx); err != nil {
		return driver.Grant{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.freeLocked(req, now) {
		return driver.Grant{}, driver.ErrNotAcquired
	}
	return b.takeLocked(req, now), nil
}

// AcquireAll takes every key of reqs, or none if another token holds one.
func (b *Backend) AcquireAll(ctx context.Context, reqs []driver.AcquireRequest) ([]driver.Grant, error) {
	if err := driver.ValidateAcquireAll(reqs); err != nil {
		return nil, err
	}
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, req := range reqs {
		if !b.freeLocked(req, now) {
			return nil, &driver.HeldError{Key: req.Key}
		}
	}
	grants := make([]driver.Grant, len(reqs))
	for i, req := range reqs {
		grants[i] = b.takeLocked(req, now)
	}
	return grants, nil
}

// AcquiresTogether reports true: every key lives in the one map.
func (b *Backend) AcquiresTogether([]string) bool { return true }

// freeLocked reports whether req may take its key: nobody holds it, or
// req's token does.
func (b *store) freeLocked(req driver.AcquireRequest, now time.Time) bool {
	e := b.live(req.Key, now)
	return e == nil || e.token == req.Token
}

// takeLocked grants req's key, which freeLocked allowed.
func (b *store) takeLocked(req driver.AcquireRequest, now time.Time) driver.Grant {
	if e := b.live(req.Key, now); e != nil { // a retried request that already won: renewed from now
		e.expires = now.Add(req.TTL)
		return e.grant()
	}
	b.fence++
	e := newEntry(req, b.fence, now)
	b.locks[req.Key] = e
	if len(b.locks) >= b.sweepAt {
		b.sweepLocked(now)
	}
	return e.grant()
}

// sweepLocked drops expired entries so that abandoned keys do not pile up.
func (b *store) sweepLocked(now time.Time) {
	maps.DeleteFunc(b.locks, func(_ string, e *entry) bool { return !now.Before(e.expires) })
	b.sweepAt = max(1024, 2*len(b.locks))
}

// Renew resets key's lease to ttl if token holds it.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.live(key, now)
	if e == nil || e.token != token {
		return driver.ErrNotHeld
	}
	e.expires = now.Add(ttl)
	return nil
}

// Release deletes key if token holds it and wakes its waiters.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.live(key, time.Now())
	if e == nil || e.token != token {
		return driver.ErrNotHeld
	}
	delete(b.locks, key)
	b.notifyLocked(key)
	return nil
}

// Handoff gives key to next.Token, with a new fence, if token holds it.
func (b *Backend) Handoff(ctx context.Context, key, token string, next driver.AcquireRequest) (driver.Grant, error) {
	if err := b.check(ctx); err != nil {
		return driver.Grant{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.live(key, now)
	if e == nil || e.token != token {
		return driver.Grant{}, driver.ErrNotHeld
	}
	b.fence++
	n := newEntry(next, b.fence, now)
	b.locks[key] = n
	return n.grant(), nil
}

// ForceRelease removes key whoever holds it, as an operator would, wakes its
// waiters, and returns what the store knew of the hold. The holder finds out
// at its next renewal.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	if err := b.check(ctx); err != nil {
		return driver.Info{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.live(key, now)
	if e == nil {
		return driver.Info{}, driver.ErrNotHeld
	}
	delete(b.locks, key)
	b.notifyLocked(key)
	return e.info(key, now), nil
}

// RequestRelease tells key's holder that reason asks it to release the key,
// and returns what the store knows of the hold.
func (b *Backend) RequestRelease(ctx context.Context, key, reason string) (driver.Info, error) {
	if err := b.check(ctx); err != nil {
		return driver.Info{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.live(key, now)
	if e == nil {
		return driver.Info{}, driver.ErrNotHeld
	}
	e.ask(&driver.ReleaseRequest{Reason: reason})
	return e.info(key, now), nil
}

func (b *store) notifyLocked(key string) {
	for ch := range b.watchers[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Inspect reports key's state.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.check(ctx); err != nil {
		return driver.Info{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.live(key, now)
	if e == nil {
		return driver.Info{Key: key}, nil
	}
	return e.info(key, now), nil
}

func (e *entry) info(key string, now time.Time) driver.Info {
	meta := e.meta
	meta.Labels = maps.Clone(meta.Labels)
	return driver.Info{Key: key, Held: true, Fence: e.fence, TTL: e.expires.Sub(now), Meta: meta, Permits: e.permits}
}

// List returns the held locks whose keys start with prefix, sorted by key.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []driver.Info
	for key := range b.locks {
		if e := b.live(key, now); e != nil && strings.HasPrefix(key, prefix) {
			out = append(out, e.info(key, now))
		}
	}
	slices.SortFunc(out, func(a, b driver.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// ListPage returns, sorted by key, at most limit held locks whose keys start
// with prefix and sort after after. It looks at every key of the store, but
// sorts and describes only those of the prefix after after.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if err := b.check(ctx); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit)
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	var keys []string
	for key := range b.locks {
		if key > after && strings.HasPrefix(key, prefix) && b.live(key, now) != nil {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	out := make([]driver.Info, 0, min(len(keys), limit))
	for _, key := range keys[:min(len(keys), limit)] {
		out = append(out, b.locks[key].info(key, now))
	}
	return out, nil
}

// Watch returns a channel that fires when key is released.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := b.check(ctx); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	b.mu.Lock()
	if b.watchers[key] == nil {
		b.watchers[key] = make(map[chan struct{}]struct{})
	}
	b.watchers[key][ch] = struct{}{}
	b.mu.Unlock()
	stop := func() {
		b.mu.Lock()
		delete(b.watchers[key], ch)
		if len(b.watchers[key]) == 0 {
			delete(b.watchers, key)
		}
		b.mu.Unlock()
	}
	return ch, stop, nil
}

// Close closes this handle; the store and its other handles are untouched.
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}
