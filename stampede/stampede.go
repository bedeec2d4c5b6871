package stampede

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
)

// KeyPrefix is prefixed to a cache key to make the key of its rebuild lock.
const KeyPrefix = "stampede/"

// Defaults of the options.
const (
	DefaultTTL         = time.Minute
	DefaultWait        = 10 * time.Second
	DefaultLoadTimeout = 30 * time.Second
)

// ErrLoadPanicked is matched by the error of a load that panicked; the
// error carries the panic value and the stack.
var ErrLoadPanicked = errors.New("stampede: load panicked")

// LoadFunc computes the value of a key from its source (a database, a
// service). Its context ends when the caller's does (inline loads), when the
// load timeout passes, when the rebuild lock is lost, or when the Cache is
// closed (background refreshes).
type LoadFunc func(ctx context.Context) ([]byte, error)

// Cache serves values from a Store and rebuilds a missing or expired value
// with one load per key across every replica that shares the store and the
// lock store. It is safe for concurrent use.
type Cache struct {
	client      *distlock.Client
	store       Store
	ttl         time.Duration
	stale       time.Duration
	wait        time.Duration
	loadTimeout time.Duration
	jitter      float64
	lockOpts    []distlock.Option
	onError     func(key string, err error)

	bgCtx   context.Context // of background refreshes; cancelled by Close
	cancel  context.CancelFunc
	mu      sync.Mutex
	closed  bool
	flights map[string]*flight // rebuilds under way in this process, by key
	bg      sync.WaitGroup     // background refreshes and flights

	hits, staleServed, misses, joined, waits, loads, loadFailures, refused atomic.Uint64
}

// flight is one rebuild of a key in this process, which every local caller
// that misses the key meanwhile shares.
type flight struct {
	done    chan struct{} // closed when v and err are set
	v       []byte
	err     error
	callers int                // still waiting for it; guarded by Cache.mu
	cancel  context.CancelFunc // of the rebuild, when no caller is left
}

// Option configures a Cache.
type Option func(*Cache)

// WithTTL sets how long a loaded value is fresh: served as a hit without any
// lock. The default is DefaultTTL; it must be positive.
func WithTTL(d time.Duration) Option { return func(c *Cache) { c.ttl = d } }

// WithStale sets the bound on staleness: how long past its TTL a value is
// still served, at once, while one caller refreshes it in the background.
// Past that bound callers wait for a fresh value as on a miss. The default
// is 0: no stale value is ever served.
func WithStale(d time.Duration) Option { return func(c *Cache) { c.stale = d } }

// WithWait bounds how long a caller that found no servable value waits for
// the caller that loads it; the caller's context bounds it too. The default
// is DefaultWait; it must be positive.
func WithWait(d time.Duration) Option { return func(c *Cache) { c.wait = d } }

// WithLoadTimeout bounds every load. The default is DefaultLoadTimeout; it
// must be positive.
func WithLoadTimeout(d time.Duration) Option { return func(c *Cache) { c.loadTimeout = d } }

// WithJitter shortens each value's TTL by a random fraction of up to f, so
// that keys written together do not expire together. The default is 0; it
// must be in [0, 1).
func WithJitter(f float64) Option { return func(c *Cache) { c.jitter = f } }

// WithLockOptions sets options of the rebuild lock (WithLease, WithOwner,
// ...). The default is none: distlock's default lease, renewed by the
// watchdog for as long as the load runs. A WithWait among them is
// overridden by the Cache's own wait.
func WithLockOptions(opts ...distlock.Option) Option {
	return func(c *Cache) { c.lockOpts = append(c.lockOpts, opts...) }
}

// OnError calls fn with the errors that reach no caller: a background
// refresh that failed (its load, its lock or its write), a write or a
// release that failed after an inline load. fn must be fast and safe for
// concurrent use. The default is none.
func OnError(fn func(key string, err error)) Option { return func(c *Cache) { c.onError = fn } }

// New returns a cache over store whose rebuilds are serialised by locks of
// client. Every replica must use the same lock store and the same Store.
func New(client *distlock.Client, store Store, opts ...Option) (*Cache, error) {
	if client == nil || store == nil {
		return nil, fmt.Errorf("stampede: New: %w: client and store are required", distlock.ErrInvalidOption)
	}
	c := &Cache{client: client, store: store, ttl: DefaultTTL, wait: DefaultWait, loadTimeout: DefaultLoadTimeout}
	for _, o := range opts {
		o(c)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("stampede: New: %w: %s", distlock.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	switch {
	case c.ttl <= 0:
		return nil, bad("TTL %v must be positive", c.ttl)
	case c.stale < 0:
		return nil, bad("stale bound %v is negative", c.stale)
	case c.wait <= 0:
		return nil, bad("wait %v must be positive", c.wait)
	case c.loadTimeout <= 0:
		return nil, bad("load timeout %v must be positive", c.loadTimeout)
	case !(c.jitter >= 0 && c.jitter < 1):
		return nil, bad("jitter %v is outside [0, 1)", c.jitter)
	}
	c.bgCtx, c.cancel = context.WithCancel(context.Background())
	c.flights = make(map[string]*flight)
	return c, nil
}

// Get returns key's value. A fresh value is returned at once. A stale value
// within the bound (WithStale) is returned at once too, and the one caller
// across replicas that gets the rebuild lock without waiting refreshes it in
// the background. Without a servable value one caller loads it inline and
// the others wait, up to WithWait and ctx, and get the value it wrote.
//
// The caller that ran a failing load gets its error; the stored value is
// left as it was. An error from a background refresh goes to OnError.
func (c *Cache) Get(ctx context.Context, key string, load LoadFunc) ([]byte, error) {
	if load == nil {
		return nil, keyErr("get", key, fmt.Errorf("%w: load is nil", distlock.ErrInvalidOption))
	}
	lockKey := KeyPrefix + key
	if err := distlock.ValidateKey(lockKey); err != nil {
		return nil, keyErr("get", key, err)
	}
	if c.isClosed() {
		return nil, keyErr("get", key, distlock.ErrClosed)
	}
	e, ok, err := c.store.Get(ctx, key)
	if err != nil {
		return nil, keyErr("get", key, err)
	}
	now := time.Now()
	if ok && now.Before(e.FreshUntil) {
		c.hits.Add(1)
		return e.Value, nil
	}
	if ok && now.Before(e.StaleUntil) {
		c.staleServed.Add(1)
		c.refresh(ctx, key, lockKey, load)
		return e.Value, nil
	}
	c.misses.Add(1)
	return c.share(ctx, key, lockKey, load)
}

// share runs one rebuild of key for all the callers in this process that
// miss it meanwhile, so that they make one lock request between them and get
// its outcome: the value, or the error. The rebuild runs on past a caller
// whose ctx ends, until no caller is left (or Close).
func (c *Cache) share(ctx context.Context, key, lockKey string, load LoadFunc) ([]byte, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, keyErr("get", key, distlock.ErrClosed)
	}
	f, ok := c.flights[key]
	if ok {
		c.joined.Add(1)
	} else {
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &flight{done: make(chan struct{}), cancel: cancel}
		c.flights[key] = f
		c.bg.Add(1)
		go func() {
			defer c.bg.Done()
			stop := context.AfterFunc(c.bgCtx, cancel)
			v, err := c.rebuild(fctx, key, lockKey, load)
			stop()
			cancel()
			c.mu.Lock()
			if c.flights[key] == f {
				delete(c.flights, key)
			}
			c.mu.Unlock()
			f.v, f.err = v, err
			close(f.done)
		}()
	}
	f.callers++
	c.mu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return nil, f.err
		}
		return bytes.Clone(f.v), nil
	case <-ctx.Done():
		c.mu.Lock()
		if f.callers--; f.callers == 0 { // nobody left: later callers start afresh
			f.cancel()
			if c.flights[key] == f {
				delete(c.flights, key)
			}
		}
		c.mu.Unlock()
		return nil, keyErr("get", key, errors.Join(distlock.ErrNotAcquired, ctx.Err()))
	}
}

// refresh tries the rebuild lock once and, if it got it, reloads the value
// in the background. It never waits for another holder.
func (c *Cache) refresh(ctx context.Context, key, lockKey string, load LoadFunc) {
	l, err := c.client.TryLock(ctx, lockKey, c.lockOpts...)
	if errors.Is(err, distlock.ErrNotAcquired) {
		return // another caller refreshes
	}
	if err != nil {
		c.report(key, fmt.Errorf("refresh: %w", err))
		return
	}
	if !c.enterBackground() {
		c.release(ctx, key, l)
		return
	}
	go func() {
		defer c.bg.Done()
		ctx := c.bgCtx
		defer c.release(ctx, key, l)
		if e, ok, err := c.store.Get(ctx, key); err == nil && ok && time.Now().Before(e.FreshUntil) {
			return // refreshed between our read and our lock
		}
		if _, err := c.loadAndPut(ctx, key, l, load); err != nil {
			c.report(key, fmt.Errorf("refresh: %w", err))
		}
	}()
}

// rebuild serves a caller that found no servable value: it gets the rebuild
// lock, waiting if another holds it, reads again, and loads only if the
// value is still missing.
func (c *Cache) rebuild(ctx context.Context, key, lockKey string, load LoadFunc) ([]byte, error) {
	l, err := c.client.TryLock(ctx, lockKey, c.lockOpts...)
	if errors.Is(err, distlock.ErrNotAcquired) {
		c.waits.Add(1)
		opts := append(c.lockOpts[:len(c.lockOpts):len(c.lockOpts)], distlock.WithWait(c.wait))
		l, err = c.client.Lock(ctx, lockKey, opts...)
	}
	if err != nil {
		return nil, keyErr("get", key, err)
	}
	defer c.release(ctx, key, l)
	// Written by the holder we waited for, or between our read and our lock.
	if e, ok, err := c.store.Get(ctx, key); err != nil {
		return nil, keyErr("get", key, err)
	} else if ok && time.Now().Before(e.FreshUntil) {
		return e.Value, nil
	}
	v, err := c.loadAndPut(ctx, key, l, load)
	if err != nil {
		return nil, keyErr("get", key, err)
	}
	return v, nil
}

// loadAndPut runs load under l and writes its value with l's fence, unless l
// was lost meanwhile. A value loaded but not written is still returned: it
// is fresh from the source.
func (c *Cache) loadAndPut(ctx context.Context, key string, l *distlock.Lock, load LoadFunc) ([]byte, error) {
	c.loads.Add(1)
	lctx, cancel := context.WithTimeout(ctx, c.loadTimeout)
	stop := context.AfterFunc(l.Context(), cancel) // a lost lock ends the load
	v, err := safeLoad(lctx, load)
	stop()
	cancel()
	if err != nil {
		c.loadFailures.Add(1)
		return nil, err
	}
	if err := l.Err(); err != nil {
		c.refused.Add(1)
		c.report(key, fmt.Errorf("value not written: %w", err))
		return v, nil
	}
	fresh := c.ttl
	if c.jitter > 0 {
		fresh -= time.Duration(rand.Float64() * c.jitter * float64(fresh))
	}
	now := time.Now()
	e := Entry{Value: v, FreshUntil: now.Add(fresh), StaleUntil: now.Add(fresh + c.stale), Fence: l.Fence()}
	stored, err := c.store.Put(ctx, key, e)
	switch {
	case err != nil:
		c.report(key, fmt.Errorf("write: %w", err))
	case !stored:
		c.refused.Add(1)
	}
	return v, nil
}

// safeLoad runs load, turning a panic into an error matching ErrLoadPanicked.
func safeLoad(ctx context.Context, load LoadFunc) (v []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, fmt.Errorf("%w: %v\n%s", ErrLoadPanicked, p, debug.Stack())
		}
	}()
	v, err = load(ctx)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return v, nil
}

// release releases l with a context that outlives a cancelled caller's.
func (c *Cache) release(ctx context.Context, key string, l *distlock.Lock) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), distlock.ReleaseBudget)
	defer cancel()
	if err := l.Release(rctx); err != nil && !errors.Is(err, distlock.ErrNotHeld) {
		c.report(key, err)
	}
}

func (c *Cache) report(key string, err error) {
	if c.onError != nil {
		c.onError(key, err)
	}
}

func (c *Cache) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// enterBackground counts a background refresh in, unless c is closed.
func (c *Cache) enterBackground() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.bg.Add(1)
	return true
}

// Close cancels the background refreshes, waits for them to release their
// locks, and makes later calls return an error matching distlock.ErrClosed.
// It closes neither the client nor the store, which are the caller's.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.bg.Wait()
	return nil
}

// Stats counts what a Cache did since New.
type Stats struct {
	Hits         uint64 // fresh values served
	StaleServed  uint64 // stale values served, each at once
	Misses       uint64 // calls that found no servable value
	Joined       uint64 // misses that joined a rebuild under way in this process
	Waits        uint64 // rebuilds that waited for a lock held by another client
	Loads        uint64 // loads run
	LoadFailures uint64 // loads that returned an error or panicked
	Refused      uint64 // loaded values not written: the lock was lost, or a value of a later grant was there
}

// Stats returns the counts so far.
func (c *Cache) Stats() Stats {
	return Stats{Hits: c.hits.Load(), StaleServed: c.staleServed.Load(), Misses: c.misses.Load(), Joined: c.joined.Load(),
		Waits: c.waits.Load(), Loads: c.loads.Load(), LoadFailures: c.loadFailures.Load(), Refused: c.refused.Load()}
}

// KeyError is an error about one cache key.
type KeyError struct {
	Op  string
	Key string
	Err error
}

func (e *KeyError) Error() string { return fmt.Sprintf("stampede: %s %q: %v", e.Op, e.Key, e.Err) }

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

func keyErr(op, key string, err error) error { return &KeyError{Op: op, Key: key, Err: err} }
