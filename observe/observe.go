// Package observe defines the events of a lock's life that a distlock
// client reports, and the Observer interface that receives them, as
// net/http/httptrace does for an HTTP request. An application rarely uses
// it directly: it passes an observer to distlock.WithObserver, usually one
// of package telemetry's (Prometheus metrics, log/slog records,
// OpenTelemetry spans) or a policy's. Write an Observer to feed events
// somewhere else:
//
//	type lossAlarm struct{ page func(key, reason string) }
//
//	func (lossAlarm) AcquireStarted(ctx context.Context, _ observe.Event) context.Context {
//		return ctx
//	}
//
//	func (a lossAlarm) Observe(_ context.Context, e observe.Event) {
//		if e.Kind == observe.Lost {
//			a.page(e.Key, e.Reason)
//		}
//	}
//
//	client := distlock.New(backend, distlock.WithObserver(observe.Join(metrics, lossAlarm{page})))
//
// A client without an observer builds no events and pays nothing.
package observe

import (
	"context"
	"time"
)

// Kind says what happened to a lock.
type Kind uint8

// Event kinds, in the order a lock lives through them.
const (
	// AcquireStart comes before the first attempt of an acquisition.
	// Exactly one of Acquired, NotAcquired or AcquireFailed follows it.
	// Requests that fail validation, and reentrant locks by an owner that
	// already holds the key, produce no events.
	AcquireStart Kind = iota + 1
	// Acquired: the lock was granted (Fence, Wait set).
	Acquired
	// NotAcquired: the key stayed held until the wait ended, or a policy
	// refused the request (Err matches distlock.ErrDegraded or
	// distlock.ErrInvalidOption then).
	NotAcquired
	// AcquireFailed: the store failed (Err set).
	AcquireFailed
	// Renewed: a renewal was confirmed.
	Renewed
	// RenewFailed: a renewal failed but the lock is still valid; the
	// watchdog keeps trying until the validity deadline.
	RenewFailed
	// Released: the holder released the lock (Reason, Hold set).
	Released
	// Lost: the lock ended without Release (Reason, Hold set).
	Lost
	// StoreCall: one backend request finished (Op, Latency, Err set; Key,
	// Group and Critical too when it belongs to a lock: acquire, renew,
	// release). A native driver.Waiter's wait is not a store call.
	StoreCall
	// ForceReleased: an operator freed the key whoever held it (Reason is
	// theirs; Fence, Owner and BusinessID are the ended hold's).
	ForceReleased
	// ReleaseRequested: somebody asked this holder to release the lock
	// (Reason is theirs; Hold set). The lock is still held.
	ReleaseRequested
)

var kindNames = [...]string{"", "acquire_start", "acquired", "not_acquired", "acquire_failed", "renewed", "renew_failed", "released", "lost", "store_call", "force_released", "release_requested"}

// String returns the kind's name in snake case, such as "acquired" or
// "store_call", as metrics and logs label it; "unknown" for a kind not
// listed above.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Loss reasons (Event.Reason of Lost).
const (
	LossTaken        = "taken"         // a renewal was refused, and another holder has the key
	LossDeleted      = "deleted"       // a renewal was refused, and the key is free
	LossRenewRefused = "renew_refused" // a renewal was refused, and the store could not then be read
	LossUnreachable  = "unreachable"   // no renewal was confirmed before the validity deadline
	LossMaxHold      = "max_hold"      // the MaxHold cap stopped renewal
	LossStoreDeleted = "store_deleted" // the backend reported the hold gone at once (a forced release, a session's or connection's end)
	LossExpired      = "expired"       // a lease without watchdog ran out
)

// Release reasons (Event.Reason of Released).
const (
	ReleaseReleased = "released" // released while held
	ReleaseExpired  = "expired"  // released after the store had already dropped it
	ReleaseLost     = "lost"     // released after the client had reported it lost
)

// Event is one step in a lock's life. Fields not relevant to Kind are zero.
type Event struct {
	Kind Kind
	Key  string
	// Group and Critical are the request's, as a distlock.Policy set them.
	Group    string
	Critical bool
	// Backend names the backend (driver.Namer, or distlock.WithBackendName).
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
	// "handoff", "inspect", "list", "list_page", "force_release" or
	// "request_release".
	Op      string
	Latency time.Duration
	// Reason is a loss or release reason (see the constants above), or the
	// operator's or requester's reason for ForceReleased and
	// ReleaseRequested.
	Reason string
	Err    error
	// Remote marks an event of a lock held elsewhere, through
	// distlock.Client's AcquireToken, RenewToken and ReleaseToken: this
	// process does not hold it, and its hold time is unknown (zero).
	Remote bool
}

// Observer receives lock events. It must be fast and safe for concurrent
// use: the client calls it on its acquisition and renewal paths.
type Observer interface {
	// AcquireStarted is called before an acquisition. The context it returns
	// (which may carry a span) is passed to every later event of that
	// acquisition and, without its cancellation, of the lock it yields.
	AcquireStarted(ctx context.Context, e Event) context.Context
	// Observe reports an event.
	Observe(ctx context.Context, e Event)
}

// Join combines several observers into one, called in order.
func Join(obs ...Observer) Observer { return multi(obs) }

type multi []Observer

func (m multi) AcquireStarted(ctx context.Context, e Event) context.Context {
	for _, o := range m {
		ctx = o.AcquireStarted(ctx, e)
	}
	return ctx
}

func (m multi) Observe(ctx context.Context, e Event) {
	for _, o := range m {
		o.Observe(ctx, e)
	}
}
