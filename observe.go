package distlock

import (
	"context"
	"time"
)

// EventKind says what happened to a lock.
type EventKind uint8

// Event kinds, in the order a lock lives through them.
const (
	// EventAcquireStart comes before the first attempt of an acquisition.
	// Exactly one of EventAcquired, EventNotAcquired or EventAcquireFailed
	// follows it. Requests that fail validation, and reentrant locks by an
	// owner that already holds the key, produce no events.
	EventAcquireStart EventKind = iota + 1
	// EventAcquired: the lock was granted (Fence, Wait set).
	EventAcquired
	// EventNotAcquired: the key stayed held until the wait ended, or a policy
	// refused the request (Err matches ErrDegraded or ErrInvalidOption then).
	EventNotAcquired
	// EventAcquireFailed: the store failed (Err set).
	EventAcquireFailed
	// EventRenewed: a renewal was confirmed.
	EventRenewed
	// EventRenewFailed: a renewal failed but the lock is still valid; the
	// watchdog keeps trying until the validity deadline.
	EventRenewFailed
	// EventReleased: the holder released the lock (Reason, Hold set).
	EventReleased
	// EventLost: the lock ended without Release (Reason, Hold set).
	EventLost
	// EventStoreCall: one backend request finished (Op, Latency, Err set;
	// Key, Group and Critical too when it belongs to a lock: acquire, renew,
	// release). A native Waiter's wait is not a store call.
	EventStoreCall
	// EventForceReleased: an operator freed the key whoever held it (Reason
	// is theirs; Fence, Owner and BusinessID are the ended hold's).
	EventForceReleased
)

var eventKindNames = [...]string{"", "acquire_start", "acquired", "not_acquired", "acquire_failed", "renewed", "renew_failed", "released", "lost", "store_call", "force_released"}

func (k EventKind) String() string {
	if int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "unknown"
}

// Loss reasons (Event.Reason for EventLost).
const (
	LossRenewRefused = "renew_refused" // the store said the token no longer holds the key
	LossUnreachable  = "unreachable"   // no renewal was confirmed before the validity deadline
	LossMaxHold      = "max_hold"      // the MaxHold cap stopped renewal
	LossStoreDeleted = "store_deleted" // the backend reported the hold gone (session, connection)
	LossExpired      = "expired"       // a lease without watchdog ran out
)

// Release reasons (Event.Reason for EventReleased).
const (
	ReleaseReleased = "released" // released while held
	ReleaseExpired  = "expired"  // released after the store had already dropped it
	ReleaseLost     = "lost"     // released after the client had reported it lost
)

// Event is one step in a lock's life. Fields not relevant to Kind are zero.
type Event struct {
	Kind       EventKind
	Key        string
	Group      string
	Critical   bool
	Backend    string
	Owner      string
	BusinessID string
	// TokenID is a short hash of the token, safe to log.
	TokenID string
	Fence   uint64
	// Wait is how long the acquisition waited.
	Wait time.Duration
	// Hold is how long the lock was held.
	Hold time.Duration
	// Op and Latency describe a store call: "acquire", "renew", "release",
	// "handoff", "inspect", "list", "list_page" or "force_release".
	Op      string
	Latency time.Duration
	Reason  string
	Err     error
	// Remote marks an event of a lock held elsewhere, through AcquireToken,
	// RenewToken and ReleaseToken: this process does not hold it, and its
	// hold time is unknown (zero).
	Remote bool
}

// Observer receives lock events. It must be fast and safe for concurrent use;
// package telemetry provides Prometheus, slog and OpenTelemetry observers.
type Observer interface {
	// AcquireStarted is called before an acquisition. The context it returns
	// (which may carry a span) is passed to every later event of that
	// acquisition and, without its cancellation, of the lock it yields.
	AcquireStarted(ctx context.Context, e Event) context.Context
	// Observe reports an event.
	Observe(ctx context.Context, e Event)
}

// Observers combines several observers into one, called in order.
func Observers(obs ...Observer) Observer { return multiObserver(obs) }

type multiObserver []Observer

func (m multiObserver) AcquireStarted(ctx context.Context, e Event) context.Context {
	for _, o := range m {
		ctx = o.AcquireStarted(ctx, e)
	}
	return ctx
}

func (m multiObserver) Observe(ctx context.Context, e Event) {
	for _, o := range m {
		o.Observe(ctx, e)
	}
}

// Policy governs requests before they reach the store. Apply may adjust r
// (set Group and Critical, clamp values) or refuse it with an error matching
// ErrInvalidOption or ErrDegraded. It runs before validation, so a clamped
// value is still checked.
type Policy interface {
	Apply(ctx context.Context, r *Request) error
}
