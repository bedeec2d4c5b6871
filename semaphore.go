package distlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// Semaphore is a leased counting semaphore: at most its number of permits
// held at once, across every client of the store. A permit is a *Lock on
// the semaphore's name, with everything a lock has: a token, a lease the
// watchdog renews, a loss notice (Done, Err, Context), a fence that
// increases with every permit granted for the name, and Release. A holder
// that vanishes gives its permit back when its lease runs out. Waiters are
// woken by the store when a permit is freed.
//
// Create it with Client.Semaphore, which needs a backend that keeps
// semaphores (driver.Semaphores). It is safe for concurrent use.
type Semaphore struct {
	name    string
	sem     driver.Semaphores
	permits *atomic.Int64 // the limit this handle expects, shared with its backend
	c       *Client       // takes the permits, over a permitBackend
}

// SemaphoreInfo is what the store holds of a semaphore.
type SemaphoreInfo struct {
	// Permits is the stored number of permits; 0 before any use.
	Permits int
	// Held are the live permits (key, fence, time to live, metadata).
	Held []Info
}

// Semaphore returns a handle on the semaphore name with permits permits. A
// name keeps the number of permits it was first used with: a handle with
// another number fails to acquire with ErrInvalidOption until
// Semaphore.SetPermits changes it explicitly. It fails with
// errors.ErrUnsupported if the backend keeps no semaphores, and with
// ErrInvalidKey or ErrInvalidOption on a bad name or a number under 1.
// Close the handle when done (Client.Close closes it too).
func (c *Client) Semaphore(name string, permits int) (*Semaphore, error) {
	if err := driver.ValidateKey(name); err != nil {
		return nil, keyErr("semaphore", name, err)
	}
	if permits < 1 {
		return nil, keyErr("semaphore", name, fmt.Errorf("%w: %d permits: want at least 1", ErrInvalidOption, permits))
	}
	sem, ok := c.backend.(driver.Semaphores)
	if !ok {
		return nil, keyErr("semaphore", name, fmt.Errorf("%s keeps no semaphores: %w", c.backendName, errors.ErrUnsupported))
	}
	limit := new(atomic.Int64)
	limit.Store(int64(permits))
	var pb driver.Backend = permitBackend{sem: sem, limit: limit}
	if w, ok := sem.(driver.PermitWaiter); ok {
		pb = waitingPermits{permitBackend{sem: sem, limit: limit}, w}
	}
	inner, err := c.derive(pb, "acquire permit")
	if err != nil {
		return nil, keyErr("semaphore", name, err)
	}
	return &Semaphore{name: name, sem: sem, permits: limit, c: inner}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Acquire takes a permit, waiting while all are held: up to WithWait if
// given, else until ctx ends (ErrNotAcquired then). opts are a lock's.
func (s *Semaphore) Acquire(ctx context.Context, opts ...Option) (*Lock, error) {
	return s.c.Lock(ctx, s.name, opts...)
}

// TryAcquire makes one attempt to take a permit, and fails with
// ErrNotAcquired at once if all are held.
func (s *Semaphore) TryAcquire(ctx context.Context, opts ...Option) (*Lock, error) {
	return s.c.TryLock(ctx, s.name, opts...)
}

// AcquireN takes n permits as one hold, waiting until n are free together:
// up to WithWait if given, else until ctx ends (ErrNotAcquired then). The
// hold is one *Lock (one token, fence, lease and Release) that counts n
// permits. While it waits, no request made after it is granted permits,
// whatever its size, even where free permits would fit it (the rule of
// golang.org/x/sync/semaphore.Weighted), so a stream of small requests
// cannot starve it; requests of several permits that wait are served in
// the order they began waiting. n must be 1 to the number of permits
// (ErrInvalidOption), and the backend must take weighted holds
// (driver.WeightedPermits; errors.ErrUnsupported otherwise) unless n is 1.
func (s *Semaphore) AcquireN(ctx context.Context, n int, opts ...Option) (*Lock, error) {
	var l *Lock
	err := s.takeN(ctx, n, opts, func(opts []Option) (err error) {
		l, err = s.c.Lock(ctx, s.name, opts...)
		return err
	})
	return l, err
}

// AcquireTokenN is AcquireN for a holder elsewhere, as AcquireToken takes
// one permit: the hold of n permits is renewed and released with token.
func (s *Semaphore) AcquireTokenN(ctx context.Context, n int, token string, opts ...Option) (TokenGrant, error) {
	var g TokenGrant
	err := s.takeN(ctx, n, opts, func(opts []Option) (err error) {
		g, err = s.c.AcquireToken(ctx, s.name, token, opts...)
		return err
	})
	return g, err
}

// takeN runs take with the options of a hold of n permits: for more than
// one, an intent that keeps later requests out while it waits, withdrawn
// if take fails.
func (s *Semaphore) takeN(ctx context.Context, n int, opts []Option, take func([]Option) error) error {
	if err := s.checkN(n); err != nil {
		return err
	}
	var r Request
	for _, o := range opts {
		o(&r)
	}
	if n == 1 || r.intent != "" { // one permit waits in no line; the caller's own intent (WithPermitIntent) it withdraws
		return take(append([]Option{withPermits(n)}, opts...))
	}
	intent := newToken()
	err := take(append([]Option{withPermits(n), func(r *Request) { r.intent = intent }}, opts...))
	if err != nil {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = s.sem.(driver.WeightedPermits).WithdrawPermitIntent(wctx, s.name, intent)
		cancel()
	}
	return err
}

// TryAcquireN makes one attempt to take n permits as one hold, and fails
// with ErrNotAcquired at once if fewer are free or an earlier request
// waits; refused, it keeps no request out.
func (s *Semaphore) TryAcquireN(ctx context.Context, n int, opts ...Option) (*Lock, error) {
	if err := s.checkN(n); err != nil {
		return nil, err
	}
	return s.c.TryLock(ctx, s.name, append([]Option{withPermits(n)}, opts...)...)
}

// WithdrawIntent ends the intent id of a request of several permits by
// token (WithPermitIntent), letting the requests it kept out in; an intent
// that ended already is no error.
func (s *Semaphore) WithdrawIntent(ctx context.Context, id string) error {
	w, ok := s.sem.(driver.WeightedPermits)
	if !ok {
		return keyErr("withdraw intent", s.name, errors.ErrUnsupported)
	}
	if err := w.WithdrawPermitIntent(ctx, s.name, id); err != nil {
		return keyErr("withdraw intent", s.name, err)
	}
	return nil
}

// checkN checks the permits of one hold.
func (s *Semaphore) checkN(n int) error {
	if limit := int(s.permits.Load()); n < 1 || n > limit {
		return keyErr("acquire permit", s.name, fmt.Errorf("%w: %d permits in one hold: want 1 to %d", ErrInvalidOption, n, limit))
	}
	if _, ok := s.sem.(driver.WeightedPermits); !ok && n > 1 {
		return keyErr("acquire permit", s.name, fmt.Errorf("a hold of %d permits: %w", n, errors.ErrUnsupported))
	}
	return nil
}

// withPermits makes an acquisition take n permits as one hold.
func withPermits(n int) Option { return func(r *Request) { r.permits = n } }

// SetPermits changes the semaphore's number of permits to n, for every
// client: the explicit way to change it. Permits held over a lowered number
// stay until released or expired.
func (s *Semaphore) SetPermits(ctx context.Context, n int) error {
	if n < 1 {
		return keyErr("set permits", s.name, fmt.Errorf("%w: %d permits: want at least 1", ErrInvalidOption, n))
	}
	if err := s.sem.SetPermits(ctx, s.name, n); err != nil {
		return keyErr("set permits", s.name, err)
	}
	s.permits.Store(int64(n))
	return nil
}

// Inspect returns the semaphore's stored number of permits and its live
// permits.
func (s *Semaphore) Inspect(ctx context.Context) (SemaphoreInfo, error) {
	limit, held, err := s.sem.InspectPermits(ctx, s.name)
	if err != nil {
		return SemaphoreInfo{}, keyErr("inspect", s.name, err)
	}
	return SemaphoreInfo{Permits: limit, Held: held}, nil
}

// AcquireToken takes a permit for a holder elsewhere, as Client.AcquireToken
// takes a lock: the holder proves itself with token to RenewToken and
// ReleaseToken, on this handle or any other of the name, and the handle
// keeps nothing (closing it releases no permit taken so).
func (s *Semaphore) AcquireToken(ctx context.Context, token string, opts ...Option) (TokenGrant, error) {
	return s.c.AcquireToken(ctx, s.name, token, opts...)
}

// RenewToken renews token's permit for lease from now, as Client.RenewToken
// renews a lock; ErrNotHeld if token holds no permit of the semaphore.
func (s *Semaphore) RenewToken(ctx context.Context, token string, lease time.Duration) error {
	return s.c.RenewToken(ctx, s.name, token, lease)
}

// ReleaseToken frees token's permit, as Client.ReleaseToken releases a lock;
// ErrNotHeld if token holds no permit of the semaphore.
func (s *Semaphore) ReleaseToken(ctx context.Context, token string) error {
	return s.c.ReleaseToken(ctx, s.name, token)
}

// Close releases the permits this handle holds and ends its waits; the
// client and its backend stay open.
func (s *Semaphore) Close() error { return s.c.Close() }

// permitBackend runs a semaphore's permits through the client's machinery
// as if each were a lock on the semaphore's name.
type permitBackend struct {
	sem   driver.Semaphores
	limit *atomic.Int64
}

var _ driver.Notifier = permitBackend{}

func (p permitBackend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if req.Permits > 1 {
		return p.sem.(driver.WeightedPermits).AcquirePermits(ctx, req, int(p.limit.Load()))
	}
	return p.sem.AcquirePermit(ctx, req, int(p.limit.Load()))
}

func (p permitBackend) Renew(ctx context.Context, name, token string, ttl time.Duration) error {
	return p.sem.RenewPermit(ctx, name, token, ttl)
}

func (p permitBackend) Release(ctx context.Context, name, token string) error {
	return p.sem.ReleasePermit(ctx, name, token)
}

// Inspect reports the semaphore held when all its permits are.
func (p permitBackend) Inspect(ctx context.Context, name string) (driver.Info, error) {
	limit, held, err := p.sem.InspectPermits(ctx, name)
	if err != nil {
		return driver.Info{}, err
	}
	return driver.Info{Key: name, Held: limit > 0 && heldPermits(held) >= limit}, nil
}

// heldPermits is the number of permits the holds count.
func heldPermits(held []driver.Info) int {
	n := 0
	for _, i := range held {
		n += max(i.Permits, 1)
	}
	return n
}

func (p permitBackend) Watch(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return p.sem.WatchPermits(ctx, name)
}

// Close leaves the backend, which the parent client owns, open.
func (permitBackend) Close() error { return nil }

// waitingPermits is a permitBackend whose backend waits for permits itself
// (driver.PermitWaiter): the client waits through AcquireWait, as for a
// lock in a store's queue.
type waitingPermits struct {
	permitBackend
	w driver.PermitWaiter
}

var _ driver.Waiter = waitingPermits{}

func (p waitingPermits) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return p.w.AcquirePermitWait(ctx, req, int(p.limit.Load()))
}
