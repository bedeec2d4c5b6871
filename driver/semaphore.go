package driver

import (
	"context"
	"time"
)

// Semaphores is implemented by backends that keep leased counting
// semaphores natively: at most a limit of permits of one name held at
// once, each by a token with a time to live, as a lock is. The client's
// Semaphore runs its permits as locks (watchdog, loss notice, waiting)
// through these calls, one attempt at a time.
type Semaphores interface {
	// AcquirePermit makes one attempt to take a permit of the semaphore
	// req.Key for req.Token, for req.TTL, with req.Meta. limit is the limit
	// the caller expects: a name with no stored limit gets it; a name whose
	// stored limit differs fails with an error matching ErrInvalidOption
	// that names both. It returns an error matching ErrNotAcquired while
	// limit live permits are held. The grant's fence strictly increases
	// with every permit granted for the name.
	AcquirePermit(ctx context.Context, req AcquireRequest, limit int) (Grant, error)
	// RenewPermit resets the time to live of token's permit of name to
	// ttl, or returns an error matching ErrNotHeld if token holds none.
	RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error
	// ReleasePermit frees token's permit of name, or returns an error
	// matching ErrNotHeld if token holds none.
	ReleasePermit(ctx context.Context, name, token string) error
	// SetPermits stores n (at least 1) as name's limit. Permits held over a
	// lowered limit stay until released or expired; none is granted until
	// fewer than n are held.
	SetPermits(ctx context.Context, name string, n int) error
	// InspectPermits returns name's stored limit (0 if none is stored) and
	// its live permits, without their tokens.
	InspectPermits(ctx context.Context, name string) (limit int, held []Info, err error)
	// WatchPermits is Notifier.Watch for name: wake fires when a permit of
	// name may have become free. stop must be called once.
	WatchPermits(ctx context.Context, name string) (wake <-chan struct{}, stop func(), err error)
}

// PermitWaiter is implemented by Semaphores backends that wait for a permit
// where the permits are kept (a lock service's own wait) rather than by
// WatchPermits notices: the client's Semaphore then waits through it, as it
// waits for a lock through Waiter. AcquirePermitWait blocks until a permit
// of req.Key is granted or ctx ends; ctx carries the caller's wait
// deadline. On failure it holds no permit and returns an error matching
// ErrNotAcquired, joined with ctx.Err().
type PermitWaiter interface {
	AcquirePermitWait(ctx context.Context, req AcquireRequest, limit int) (Grant, error)
}

// WeightedPermits is implemented by Semaphores backends that take several
// permits as one hold, with a queue of the requests that wait, so that a
// stream of small requests cannot starve a large one. The rule is
// golang.org/x/sync/semaphore.Weighted's: while a request waits, no request
// that came after it is granted permits, whatever its size, even where
// free permits would fit it.
type WeightedPermits interface {
	// AcquirePermits makes one attempt to take req.Permits permits (0 means
	// 1) of the semaphore req.Key as one hold of req.Token, for req.TTL,
	// with req.Meta; limit is as AcquirePermit's, and more permits than the
	// limit is an error matching ErrInvalidOption. It is granted only if
	// the live holds' permits plus its own are at most limit and no live
	// intent is older than req.Intent's (none at all when req.Intent is
	// empty). Refused with a non-empty req.Intent, it records the intent,
	// after every live one if it is new, and keeps it for WriteIntentTTL;
	// a grant removes it. The hold counts its permits until it is released
	// or expires: RenewPermit and ReleasePermit act on all of them, and
	// InspectPermits reports the hold once with Info.Permits set. On such
	// a backend AcquirePermit is AcquirePermits of one permit, and waits
	// behind intents too.
	AcquirePermits(ctx context.Context, req AcquireRequest, limit int) (Grant, error)
	// WithdrawPermitIntent removes the intent of a request that gave up
	// waiting, letting the requests it kept out in; an intent that ended
	// already is no error.
	WithdrawPermitIntent(ctx context.Context, name, intent string) error
}
