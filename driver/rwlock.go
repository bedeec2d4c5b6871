package driver

import (
	"context"
	"time"
)

// Mode is how a read-write lock is held.
type Mode int

const (
	// Exclusive is a writer's hold: nobody else holds the name.
	Exclusive Mode = iota
	// Shared is a reader's hold: other readers may hold the name too.
	Shared
)

// String returns "exclusive" or "shared".
func (m Mode) String() string {
	if m == Shared {
		return "shared"
	}
	return "exclusive"
}

// WriteIntentTTL is how long a waiting writer's intent keeps new readers
// out after its last refused attempt. A waiter retries well within it (the
// client's poll is capped at 100ms), so a live writer's intent never lapses;
// a writer that vanished stops blocking readers after it.
const WriteIntentTTL = 2 * time.Second

// RWLocks is implemented by backends that keep read-write locks natively:
// on one name, any number of Shared holders or one Exclusive holder, each
// by a token with a time to live, as a lock is. A writer that waits keeps
// new readers out (no writer starvation). The client's RWMutex runs each
// hold as a lock (watchdog, loss notice, waiting) through these calls, one
// attempt at a time.
type RWLocks interface {
	// AcquireRW makes one attempt to take req.Key in mode for req.Token,
	// for req.TTL, with req.Meta. A Shared attempt is granted while no
	// live Exclusive hold and no live write intent exists; an Exclusive
	// one while no live hold of either mode exists, whatever the intents.
	// Refused, it returns an error matching ErrNotAcquired; an Exclusive
	// attempt refused with a non-empty req.Intent records (or refreshes)
	// that intent for WriteIntentTTL, and a granted one removes it. The
	// grant's fence strictly increases with every hold granted for the
	// name, in either mode, so a writer's fence is above every reader's
	// before it.
	AcquireRW(ctx context.Context, req AcquireRequest, mode Mode) (Grant, error)
	// RenewRW resets the time to live of token's hold of name to ttl, or
	// returns an error matching ErrNotHeld if token holds none.
	RenewRW(ctx context.Context, name, token string, ttl time.Duration) error
	// ReleaseRW frees token's hold of name, or returns an error matching
	// ErrNotHeld if token holds none.
	ReleaseRW(ctx context.Context, name, token string) error
	// WithdrawIntent removes a waiting writer's intent on name, if any:
	// readers it kept out may come in.
	WithdrawIntent(ctx context.Context, name, intent string) error
	// InspectRW returns name's live holds (without their tokens) and the
	// mode they are held in (Exclusive if held by a writer, Shared
	// otherwise), and the number of live write intents.
	InspectRW(ctx context.Context, name string) (mode Mode, held []Info, intents int, err error)
	// WatchRW is Notifier.Watch for name: wake fires when a hold of name is
	// released or an intent withdrawn.
	WatchRW(ctx context.Context, name string) (wake <-chan struct{}, stop func(), err error)
}

// RWWaiter is implemented by RWLocks backends that wait for a hold where
// the locks are kept (a lock service's own wait, which keeps new readers
// out while a writer waits) rather than by WatchRW notices: the client's
// RWMutex then waits through it, as it waits for a lock through Waiter.
// AcquireRWWait blocks until req.Key is granted in mode or ctx ends; ctx
// carries the caller's wait deadline. On failure it holds nothing and
// returns an error matching ErrNotAcquired, joined with ctx.Err().
type RWWaiter interface {
	AcquireRWWait(ctx context.Context, req AcquireRequest, mode Mode) (Grant, error)
}

// RWDowngrader is implemented by RWLocks backends that turn a writer's hold
// into a reader's in one step, so that no other writer gets in between (a
// downgrade, as Curator's read-write lock has it).
type RWDowngrader interface {
	// DowngradeRW turns token's Exclusive hold of name into a Shared hold
	// of the same token, fence, time to live and metadata, atomically, and
	// wakes name's watchers: readers may join it, and writers still wait
	// for every hold to end. A Shared hold of token is left as it is (a
	// retried downgrade). If token holds nothing it returns an error
	// matching ErrNotHeld and changes nothing.
	DowngradeRW(ctx context.Context, name, token string) error
}
