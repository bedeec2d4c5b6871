package distlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
)

// Client takes locks through a Backend. It is safe for concurrent use. Close
// it when done: Close releases the locks it still holds, waits for its
// background work and closes the backend.
type Client struct {
	backend     driver.Backend
	backendName string
	acquireOp   string // what its acquisitions' errors say was attempted: "lock", or a child's primitive's
	maxLease    time.Duration
	observer    observe.Observer
	policy      Policy

	closeCtx context.Context    // done once Close begins: ends every wait
	closeNow context.CancelFunc // of closeCtx
	bgCtx    context.Context    // of background cleanups; cancelled when Close gives up on them
	bgCancel context.CancelFunc // of bgCtx
	inflight sync.WaitGroup     // acquisitions under way, which Close waits for
	bg       sync.WaitGroup     // background work: cleanups, ticks, loss callbacks
	lines    lines              // this client's waiters per key, in arrival order
	sched    schedule           // runs the holds' renewals and deadlines

	mu        sync.Mutex
	closed    bool // no new acquisitions
	bgClosed  bool // no new background work: Close is waiting for it
	holds     map[*hold]struct{}
	reentrant map[ownedKey]*hold
	children  map[*Client]struct{} // of semaphores and read-write locks: closed by Close
	parent    *Client              // of a child, which leaves it at Close
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
		acquireOp: "lock",
		holds:     make(map[*hold]struct{}),
		reentrant: make(map[ownedKey]*hold),
		children:  make(map[*Client]struct{}),
	}
	c.closeCtx, c.closeNow = context.WithCancel(context.Background())
	c.bgCtx, c.bgCancel = context.WithCancel(context.Background())
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
//
// Close ends a wait at once with an error matching ErrClosed.
func (c *Client) Lock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return c.acquire(ctx, key, false, opts)
}

// TryLock makes one attempt to acquire key and returns an error matching
// ErrNotAcquired at once if it is held. A WithWait option is ignored.
func (c *Client) TryLock(ctx context.Context, key string, opts ...Option) (*Lock, error) {
	return c.acquire(ctx, key, true, opts)
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
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseBudget)
		defer relCancel()
		err = errors.Join(err, l.Release(relCtx))
	}()
	return fn(fnCtx, l)
}

// Inspect reports the state of key in the store.
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, keyErr("inspect", key, err)
	}
	var info Info
	err := c.call(ctx, nil, "inspect", func() (err error) {
		info, err = c.backend.Inspect(ctx, key)
		return err
	})
	if err != nil {
		return Info{}, keyErr("inspect", key, err)
	}
	return info, nil
}

// ForceRelease frees key whoever holds it, for operators: a job that hung
// while its lock keeps renewing, say. reason is required and goes, for the
// audit trail, to the observers (observe.ForceReleased) and to the backend
// (driver.ForceOptions), which may record it. It returns what the store
// knew of the hold it ended, an error matching ErrNotHeld if the key was
// free, and one matching errors.ErrUnsupported if the backend cannot (see
// driver.ForceReleaser).
//
// The holder is not told at once: it learns at its next renewal, or when its
// validity deadline passes, so it may still write meanwhile. Use it when the
// holder is known dead or stuck, and have the resource check fences.
func (c *Client) ForceRelease(ctx context.Context, key, reason string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, keyErr("force release", key, err)
	}
	if strings.TrimSpace(reason) == "" {
		return Info{}, keyErr("force release", key, fmt.Errorf("%w: a reason is required", ErrInvalidOption))
	}
	fr, ok := c.backend.(driver.ForceReleaser)
	if !ok {
		return Info{}, keyErr("force release", key, fmt.Errorf("backend %s: %w", c.backendName, errors.ErrUnsupported))
	}
	var info Info
	err := c.call(ctx, nil, "force_release", func() (err error) {
		info, err = fr.ForceRelease(ctx, key, driver.ForceOptions{Reason: reason})
		return err
	})
	if err != nil {
		return Info{}, keyErr("force release", key, err)
	}
	if c.observer != nil {
		e := observe.Event{Kind: observe.ForceReleased, Key: key, Backend: c.backendName, Reason: reason, Fence: info.Fence,
			Owner: info.Meta.Owner, BusinessID: info.Meta.BusinessID}
		c.observer.Observe(ctx, e)
	}
	return info, nil
}

// MaxRequestReason is the longest reason, in bytes, that RequestRelease
// takes: it travels in the store's notice to the holder.
const MaxRequestReason = 256

// RequestRelease asks the holder of key to release it (Curator's
// revocation): the holder's Lock.ReleaseRequested closes, with reason, and
// the holder may finish its unit of work and Release. Nothing in the store
// changes; use ForceRelease when the holder does not answer. reason is
// required, at most MaxRequestReason bytes of UTF-8. It returns the holder's
// Info, an error matching ErrNotHeld if the key is free, and one matching
// errors.ErrUnsupported if the backend cannot tell a holder (see
// driver.ReleaseRequester).
//
// The request reaches the holder's current grant only, through the store's
// notices: a holder that has not followed them since before the request (a
// dropped connection) does not learn of it, and a later holder of the key is
// not asked.
func (c *Client) RequestRelease(ctx context.Context, key, reason string) (Info, error) {
	if err := ValidateKey(key); err != nil {
		return Info{}, keyErr("request release", key, err)
	}
	switch {
	case strings.TrimSpace(reason) == "":
		return Info{}, keyErr("request release", key, fmt.Errorf("%w: a reason is required", ErrInvalidOption))
	case len(reason) > MaxRequestReason || !utf8.ValidString(reason):
		return Info{}, keyErr("request release", key, fmt.Errorf("%w: a reason is at most %d bytes of UTF-8", ErrInvalidOption, MaxRequestReason))
	}
	rr, ok := c.backend.(driver.ReleaseRequester)
	if !ok {
		return Info{}, keyErr("request release", key, fmt.Errorf("backend %s: %w", c.backendName, errors.ErrUnsupported))
	}
	var info Info
	err := c.call(ctx, nil, "request_release", func() (err error) {
		info, err = rr.RequestRelease(ctx, key, reason)
		return err
	})
	if err != nil {
		return Info{}, keyErr("request release", key, err)
	}
	return info, nil
}

// List returns the held locks whose keys start with prefix. It returns an
// error matching errors.ErrUnsupported if the backend cannot enumerate locks.
func (c *Client) List(ctx context.Context, prefix string) ([]Info, error) {
	if !validPrefix(prefix) {
		return nil, keyErr("list", prefix, ErrInvalidKey)
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
		return nil, keyErr("list", prefix, err)
	}
	return infos, nil
}

// ListPage returns, in key order (bytewise, as strings.Compare orders them),
// at most limit held locks whose keys start with prefix and sort after after
// ("" for the first page). Pass the last key of a page as after to get the
// next; a page shorter than limit is the last.
//
// On a backend that implements driver.PageLister a page costs about one
// page: the store reads the locks of the page (and, on some stores, the
// names of every lock under prefix, see the backend's ListPage). On any
// other backend that can list, ListPage calls List and keeps one page of its
// answer, so every page costs as much as listing every lock under prefix.
//
// It returns an error matching ErrInvalidKey if prefix or after has a control
// character or is longer than MaxKeyLen, ErrInvalidOption if limit is under 1,
// and errors.ErrUnsupported if the backend cannot enumerate locks.
func (c *Client) ListPage(ctx context.Context, prefix, after string, limit int) ([]Info, error) {
	switch {
	case !validPrefix(prefix):
		return nil, keyErr("list", prefix, ErrInvalidKey)
	case !validPrefix(after):
		return nil, keyErr("list", prefix, fmt.Errorf("%w: after %q", ErrInvalidKey, after))
	case limit < 1:
		return nil, keyErr("list", prefix, fmt.Errorf("%w: limit %d, want at least 1", ErrInvalidOption, limit))
	}
	var page func() ([]Info, error)
	switch b := c.backend.(type) {
	case driver.PageLister:
		page = func() ([]Info, error) { return b.ListPage(ctx, prefix, after, limit) }
	case driver.Lister:
		page = func() ([]Info, error) {
			infos, err := b.List(ctx, prefix)
			if err != nil {
				return nil, err
			}
			infos = slices.DeleteFunc(infos, func(i Info) bool { return i.Key <= after })
			slices.SortFunc(infos, func(x, y Info) int { return strings.Compare(x.Key, y.Key) })
			return infos[:min(len(infos), limit)], nil
		}
	default:
		return nil, fmt.Errorf("distlock: list: backend %s: %w", c.backendName, errors.ErrUnsupported)
	}
	var infos []Info
	err := c.call(ctx, nil, "list_page", func() (err error) {
		infos, err = page()
		return err
	})
	if err != nil {
		return nil, keyErr("list", prefix, err)
	}
	return infos, nil
}

// validPrefix reports whether p may start keys: no control character, at
// most MaxKeyLen bytes. "" is one.
func validPrefix(p string) bool {
	return !strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) && len(p) <= MaxKeyLen
}

// Close ends every wait of the client with ErrClosed, releases every lock it
// still holds (and those it lost that the store may still hold), waits for
// its background work within ReleaseBudget, and closes the backend. Callbacks
// must not call Close.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	children := make([]*Client, 0, len(c.children))
	for d := range c.children {
		children = append(children, d)
	}
	c.mu.Unlock()
	var errs []error
	for _, d := range children {
		errs = append(errs, d.Close())
	}
	if p := c.parent; p != nil {
		p.mu.Lock()
		delete(p.children, c)
		p.mu.Unlock()
	}
	c.closeNow()
	c.inflight.Wait() // the waits end at once; single attempts within the backend's timeout

	ctx, cancel := context.WithTimeout(context.Background(), ReleaseBudget)
	defer cancel()
	c.mu.Lock()
	holds := make([]*hold, 0, len(c.holds))
	for h := range c.holds {
		holds = append(holds, h)
	}
	c.mu.Unlock()
	for _, h := range holds {
		if err := h.release(ctx); err != nil && !errors.Is(err, ErrNotHeld) && !errors.Is(err, ErrLockLost) {
			errs = append(errs, err)
		}
	}
	c.mu.Lock()
	c.bgClosed = true
	c.mu.Unlock()
	stop := context.AfterFunc(ctx, c.bgCancel) // cleanups get what is left of the budget
	c.bg.Wait()
	stop()
	c.bgCancel()
	c.sched.stop()
	if err := c.backend.Close(); err != nil {
		errs = append(errs, fmt.Errorf("distlock: close backend: %w", err))
	}
	return errors.Join(errs...)
}

// derive returns a client over b, a view of c's backend (a semaphore's
// permits, a read-write lock's holds of one mode), with c's options, whose
// acquisitions' errors say op was attempted; c's Close closes it.
func (c *Client) derive(b driver.Backend, op string) (*Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	d := New(b)
	d.backendName, d.maxLease, d.observer, d.policy, d.parent = c.backendName, c.maxLease, c.observer, c.policy, c
	d.acquireOp = op
	c.children[d] = struct{}{}
	return d, nil
}

// enterAcquire counts an acquisition in, unless the client is closed.
func (c *Client) enterAcquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.inflight.Add(1)
	return true
}

// enterBackground counts background work in, unless Close has stopped
// waiting for it; the caller calls c.bg.Done when it is done.
func (c *Client) enterBackground() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bgClosed {
		return false
	}
	c.bg.Add(1)
	return true
}

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
	e := observe.Event{Kind: observe.StoreCall, Backend: c.backendName, Op: op, Latency: time.Since(start), Err: err}
	if r != nil {
		e = c.event(r, e)
	}
	c.observer.Observe(ctx, e)
}

// goBackground runs f in a goroutine that Close waits for. Once Close has
// stopped waiting, f is dropped: it is a cleanup that the store's lease
// makes good.
func (c *Client) goBackground(f func()) {
	if !c.enterBackground() {
		return
	}
	go func() {
		defer c.bg.Done()
		f()
	}()
}
