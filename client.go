package distlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// Client takes locks through a Backend. It is safe for concurrent use. Close
// it when done: Close releases the locks it still holds, waits for its
// background work and closes the backend.
type Client struct {
	backend     driver.Backend
	backendName string
	maxLease    time.Duration
	observer    Observer
	policy      Policy

	mu        sync.Mutex
	closed    bool        // under mu; authoritative
	closing   atomic.Bool // set with closed, read without the lock
	holds     map[*hold]struct{}
	reentrant map[ownedKey]*hold
	bg        sync.WaitGroup // background cleanups
	lines     lines          // this client's waiters per key, in arrival order
	sched     schedule       // runs the holds' renewals and deadlines
}

type ownedKey struct{ key, owner string }

// New returns a client over backend. It panics if backend is nil, as that is
// a programming error that no request could recover from.
func New(backend driver.Backend, opts ...ClientOption) *Client {
	if backend == nil {
		panic("distlock: New called with a nil backend")
	}
	c := &Client{
		backend:   backend,
		holds:     make(map[*hold]struct{}),
		reentrant: make(map[ownedKey]*hold),
	}
	if n, ok := backend.(driver.Namer); ok {
		c.backendName = n.Name()
	} else {
		c.backendName = "custom"
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Backend returns the backend the client uses.
func (c *Client) Backend() driver.Backend { return c.backend }

type ownerKey struct{}

// ContextWithOwner returns a context that carries owner as the identity for
// WithOwner and reentrancy (Go has no thread identity to key on).
func ContextWithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFromContext returns the owner set by ContextWithOwner, or "".
func OwnerFromContext(ctx context.Context) string {
	s, _ := ctx.Value(ownerKey{}).(string)
	return s
}

// Lock acquires key, waiting while it is held: up to WithWait if given, else
// until ctx ends. It returns an error matching ErrNotAcquired (joined with
// ctx.Err() when the context ended the wait) if the key stayed held.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return c.acquire(ctx, key, WaitUntilContextDone, opts)
}

// TryLock makes one attempt to acquire key and returns an error matching
// ErrNotAcquired at once if it is held. A WithWait option is ignored.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return c.acquire(ctx, key, 0, append(opts, WithWait(0)))
}

// Do acquires key like Lock, runs fn with a context that is cancelled if the
// lock is lost (or ctx ends), then releases the lock. It returns fn's error
// joined with any release error; a lock lost during fn shows as ErrLockLost.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context, l *Lock) error, opts ...Option) (err error) {
	l, err := c.Lock(ctx, key, opts...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(l.Context(), func() { cancel(l.Err()) })
	defer func() { // also on panic, so that a crashing fn does not keep the key
		stop()
		cancel(nil)
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer relCancel()
		err = errors.Join(err, l.Release(relCtx))
	}()
	return fn(fnCtx, l)
}

// Inspect reports the state of key in the store.
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, fmt.Errorf("distlock: inspect: %w", err)
	}
	var info Info
	err := c.call(ctx, nil, "inspect", func() (err error) {
		info, err = c.backend.Inspect(ctx, key)
		return err
	})
	if err != nil {
		return Info{}, fmt.Errorf("distlock: inspect %q: %w", key, err)
	}
	return info, nil
}

// List returns the held locks whose keys start with prefix. It returns an
// error matching errors.ErrUnsupported if the backend cannot enumerate locks.
func (c *Client) List(ctx context.Context, prefix string) ([]Info, error) {
	if strings.ContainsFunc(prefix, func(r rune) bool { return r < 0x20 || r == 0x7f }) || len(prefix) > MaxKeyLen {
		return nil, fmt.Errorf("distlock: list %q: %w", prefix, ErrInvalidKey)
	}
	l, ok := c.backend.(driver.Lister)
	if !ok {
		return nil, fmt.Errorf("distlock: list: backend %s: %w", c.backendName, errors.ErrUnsupported)
	}
	var infos []Info
	err := c.call(ctx, nil, "list", func() (err error) {
		infos, err = l.List(ctx, prefix)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("distlock: list %q: %w", prefix, err)
	}
	return infos, nil
}

// Close releases every lock the client still holds, waits for background
// work such as watchdogs and cleanups, and closes the backend.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.closing.Store(true)
	holds := make([]*hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var errs []error
	for _, h := range holds {
		if err := h.release(ctx); err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrLockLost) {
			errs = append(errs, err)
		}
	}
	c.bg.Wait()
	c.sched.stop()
	if err := c.backend.Close(); err != nil {
		errs = append(errs, fmt.Errorf("distlock: close backend: %w", err))
	}
	return errors.Join(errs...)
}

// cleanupTimeout bounds releases done on the caller's behalf after its own
// context ended.
const cleanupTimeout = 5 * time.Second

// call runs one backend request and reports its latency to the observer,
// labelled with the lock request r when the call belongs to one.
func (c *Client) call(ctx context.Context, r *Request, op string, f func() error) error {
	if c.observer == nil {
		return f()
	}
	start := time.Now()
	err := f()
	c.observeCall(ctx, r, op, start, err)
	return err
}

// observeCall reports a backend request that began at start. The hot paths
// use it directly, to spare the closure of call.
func (c *Client) observeCall(ctx context.Context, r *Request, op string, start time.Time, err error) {
	if c.observer == nil {
		return
	}
	e := Event{Kind: EventStoreCall, Backend: c.backendName, Op: op, Latency: time.Since(start), Err: err}
	if r != nil {
		e = c.event(r, e)
	}
	c.observer.Observe(ctx, e)
}

// goBackground runs f in a goroutine that Close waits for; once Close has
// begun waiting it runs f in the caller's goroutine instead.
func (c *Client) goBackground(f func()) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		f()
		return
	}
	c.bg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.bg.Done()
		f()
	}()
}
