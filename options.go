package distlock

import (
	"fmt"
	"maps"
	"time"

	"github.com/distlock/distlock/observe"
)

// Defaults and limits of locks.
const (
	// DefaultLease is the lease of a lock acquired without WithLease. Such a
	// lock is renewed by the watchdog every DefaultLease/3 while it is held.
	DefaultLease = 30 * time.Second

	// MinLease is the shortest lease accepted: shorter ones leave no
	// validity after the clock-drift margin.
	MinLease = 10 * time.Millisecond

	// MinRenewInterval is the shortest watchdog period accepted, and the
	// floor of the default period (a third of the lease) for short leases.
	MinRenewInterval = 5 * time.Millisecond

	// WaitUntilContextDone is the wait of Lock without WithWait: it waits for
	// as long as its context allows.
	WaitUntilContextDone time.Duration = -1

	// A release by token (Release, and the cleanups the client does on its
	// own) retries a failure whose reply never came, but at most
	// ReleaseAttempts times within ReleaseBudget, and not at all after a
	// permanent error (a closed backend). Past that the key stays in the
	// store until its lease runs out.
	ReleaseAttempts = 4
	ReleaseBudget   = 5 * time.Second
)

// Request is a lock request after options are applied. Policies (see Policy)
// may read and adjust it before any store call.
type Request struct {
	Key string
	// Wait is how long to wait for a held key: 0 tries once, > 0 waits up to
	// that long, WaitUntilContextDone waits until the context ends.
	Wait time.Duration
	// Lease is the validity of one grant or renewal.
	Lease time.Duration
	// ExplicitLease is true when the caller chose the lease.
	ExplicitLease bool
	// Watchdog renews the lock every RenewInterval while it is held.
	Watchdog bool
	// RenewInterval is the watchdog period; Lease/3 when zero.
	RenewInterval time.Duration
	// MaxHold, if positive, stops renewal that long after the grant and reports
	// the lock lost with reason LossMaxHold.
	MaxHold time.Duration
	// LockDelay keeps the key in the store this long past the holder's own
	// validity, so a holder that vanished blocks others for Lease+LockDelay.
	// A clean Release frees the key at once.
	LockDelay time.Duration
	// Reentrant lets the same Meta.Owner lock the key again on this client.
	Reentrant bool
	// Meta is stored with the lock and carried to logs.
	Meta Meta
	// OnRenewFailure, if set, is called by the watchdog for each renewal that
	// failed while the lock was still valid.
	OnRenewFailure func(error)
	// Group and Critical are set by a Policy; they label telemetry.
	Group    string
	Critical bool

	keepToken bool   // AcquireToken: the token is the caller's, never replaced or released
	intent    string // a waiting writer's or AcquireN's intent (driver.AcquireRequest.Intent)
	permits   int    // Semaphore.AcquireN: the permits of the hold (driver.AcquireRequest.Permits)
}

// Option configures one lock request.
type Option func(*Request)

// WithWait sets how long Lock waits for a held key. 0 tries once. The default
// for Lock is to wait until its context ends; TryLock always tries once. A
// grant that comes back after its validity (a slow link or machine) is
// released and, while the wait lasts, tried again with a fresh token.
func WithWait(d time.Duration) Option { return func(r *Request) { r.Wait = d } }

// WithLease sets the lease. The default is DefaultLease with the watchdog on;
// an explicit lease turns the watchdog off unless WithWatchdog(true) follows.
func WithLease(d time.Duration) Option {
	return func(r *Request) { r.Lease, r.ExplicitLease, r.Watchdog = d, true, false }
}

// WithWatchdog turns lease renewal on or off. The default is on without
// WithLease and off with it.
func WithWatchdog(on bool) Option { return func(r *Request) { r.Watchdog = on } }

// WithRenewInterval sets the watchdog period. The default is a third of the
// lease, but not under MinRenewInterval; it must be at least MinRenewInterval
// and shorter than the lease.
func WithRenewInterval(d time.Duration) Option { return func(r *Request) { r.RenewInterval = d } }

// WithMaxHold caps how long the watchdog keeps a lock: at the cap renewal
// stops and the holder is told the lock is lost. The default is no cap.
func WithMaxHold(d time.Duration) Option { return func(r *Request) { r.MaxHold = d } }

// WithLockDelay keeps the key held in the store for d beyond the holder's
// validity, so a holder that crashed or paused mid-write keeps others out for
// lease+d. Release frees the key at once. The default is 0.
func WithLockDelay(d time.Duration) Option { return func(r *Request) { r.LockDelay = d } }

// WithOwner records who holds the lock, for Inspect and logs, and is the
// identity used for reentrancy. It overrides an owner from ContextWithOwner.
func WithOwner(owner string) Option { return func(r *Request) { r.Meta.Owner = owner } }

// Reentrant lets the owner (WithOwner or ContextWithOwner) that already holds
// the key through this client lock it again: each Lock increments a count and
// the last Release frees the key. Off by default.
func Reentrant() Option { return func(r *Request) { r.Reentrant = true } }

// WithBusinessID records the business entity the lock protects (an order id,
// a job name) for Inspect and logs.
func WithBusinessID(id string) Option { return func(r *Request) { r.Meta.BusinessID = id } }

// WithWriteIntent gives a writer's attempt by token (RWMutex.AcquireToken
// with write) the write intent id: refused, the attempt keeps new readers
// out for driver.WriteIntentTTL, as a waiting writer does, until an attempt
// with the same id renews it, a grant ends it or RWMutex.WithdrawIntent
// does. It is for a lock service waiting on its caller's behalf; RWMutex's
// Lock keeps an intent of its own. Use a fresh id per wait: pglock keeps a
// withdrawn id marked until its Cleanup, so that an attempt that arrives
// after the withdrawal cannot record it again, and an attempt with that id
// keeps no reader out.
func WithWriteIntent(id string) Option { return func(r *Request) { r.intent = id } }

// WithPermitIntent gives an attempt by token of several permits
// (Semaphore.AcquireTokenN) the intent id: refused, the attempt keeps later
// requests out for driver.WriteIntentTTL, as a waiting AcquireN does, until
// an attempt with the same id renews it, a grant ends it or
// Semaphore.WithdrawIntent does. It is for a lock service waiting on its
// caller's behalf; AcquireN keeps an intent of its own. Use a fresh id per
// wait, as for WithWriteIntent.
func WithPermitIntent(id string) Option { return func(r *Request) { r.intent = id } }

// WithMetadata records labels with the lock for Inspect and logs.
func WithMetadata(labels map[string]string) Option {
	return func(r *Request) { r.Meta.Labels = maps.Clone(labels) }
}

// OnRenewFailure calls fn, from the watchdog goroutine, for each renewal that
// failed while the lock is still valid: the lock is at risk but not lost yet
// (loss is reported through Done). fn should return quickly; it may call the
// lock's Release, Renew, Extend and Err, but not the client's Close. The
// default is none.
func OnRenewFailure(fn func(err error)) Option { return func(r *Request) { r.OnRenewFailure = fn } }

// validate checks r against the client's limits; it touches no store.
func (r *Request) validate(maxLease time.Duration) error {
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	if err := r.validateLease(r.Lease, maxLease); err != nil {
		return err
	}
	switch {
	case r.Wait < 0 && r.Wait != WaitUntilContextDone:
		return bad("wait %v is negative", r.Wait)
	case r.RenewInterval < 0:
		return bad("renew interval %v is negative", r.RenewInterval)
	case r.RenewInterval > 0 && r.RenewInterval < MinRenewInterval:
		return bad("renew interval %v is under the minimum %v", r.RenewInterval, MinRenewInterval)
	case r.MaxHold < 0:
		return bad("max hold %v is negative", r.MaxHold)
	case r.LockDelay < 0:
		return bad("lock delay %v is negative", r.LockDelay)
	case r.Reentrant && r.Meta.Owner == "":
		return bad("reentrant locking needs an owner (WithOwner or ContextWithOwner)")
	}
	return nil
}

// validateLease checks a lease for r, at acquisition or for Extend: it reads
// no field that Extend changes.
func (r *Request) validateLease(lease, maxLease time.Duration) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	switch {
	case lease <= 0:
		return bad("lease %v must be positive", lease)
	case lease < MinLease:
		return bad("lease %v is under the minimum %v", lease, MinLease)
	case maxLease > 0 && lease > maxLease:
		return bad("lease %v exceeds the maximum %v", lease, maxLease)
	case r.RenewInterval >= lease:
		return bad("renew interval %v must be shorter than the lease %v", r.RenewInterval, lease)
	}
	return nil
}

// renewInterval is the watchdog period for the current lease.
func (r *Request) renewInterval() time.Duration {
	if r.RenewInterval > 0 {
		return r.RenewInterval
	}
	return max(r.Lease/3, MinRenewInterval)
}

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithMaxLease refuses leases longer than d with ErrInvalidOption. The
// default is no maximum.
func WithMaxLease(d time.Duration) ClientOption { return func(c *Client) { c.maxLease = d } }

// WithObserver sends the events of every lock's life to o (package
// observe): metrics, logs and traces through package telemetry, or an
// observer of your own. observe.Join combines several. The default is none,
// at no cost.
func WithObserver(o observe.Observer) ClientOption { return func(c *Client) { c.observer = o } }

// WithPolicy applies governance (groups, limits, degradation; see package
// policy) to every request before it reaches the store. The default is none.
func WithPolicy(p Policy) ClientOption { return func(c *Client) { c.policy = p } }

// WithBackendName names the backend in telemetry. The default is the
// backend's Name method if it has one, else "custom".
func WithBackendName(name string) ClientOption { return func(c *Client) { c.backendName = name } }
