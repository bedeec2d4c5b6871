package distlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// Lock is a held lock. Its methods are safe for concurrent use.
//
// A Lock can be lost before Release: its renewal may be refused, the store may
// drop it, or its validity may run out while the store is unreachable. Done,
// Err and Context report that; the protected resource should also check
// Fence, since no client-side signal can beat a process pause.
type Lock struct {
	h        *hold
	released atomic.Bool
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.h.r.Key }

// Token returns the random token of this acquisition. Reentrant handles of
// one acquisition share it.
func (l *Lock) Token() string { return l.h.token }

// Fence returns the fencing token: it strictly increases with every grant of
// the key. Pass it to the resource you protect (see package fence).
func (l *Lock) Fence() uint64 { return l.h.fence }

// Done returns a channel that is closed when the lock is lost or released.
func (l *Lock) Done() <-chan struct{} { return l.h.context().Done() }

// Err returns nil while the lock is held, an error matching ErrLockLost once
// it is lost (naming the reason), and one matching ErrNotHeld once released.
func (l *Lock) Err() error {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.errLocked()
}

// Context returns a context that is cancelled when the lock is lost or
// released; context.Cause gives the same error as Err.
func (l *Lock) Context() context.Context { return l.h.context() }

// HeldFor returns how long the lock has been held.
func (l *Lock) HeldFor() time.Duration { return time.Since(l.h.acquired) }

// ExpiresAt returns the local validity deadline: the time the last confirmed
// acquire or renew request was sent, plus the lease, minus a drift margin.
// The store keeps the key at least that long.
func (l *Lock) ExpiresAt() time.Time { return l.h.validUntil() }

// Renew extends the lease now, by the lease the lock was acquired with. It
// returns an error matching ErrLockLost if the store no longer holds the lock
// (and the lock is then reported lost), or a store error that leaves the lock
// held until its validity deadline.
func (l *Lock) Renew(ctx context.Context) error {
	if l.released.Load() {
		return fmt.Errorf("distlock: renew %q: %w: already released", l.h.r.Key, ErrNotHeld)
	}
	return l.h.renew(ctx)
}

// Release releases the lock. Releasing a handle twice returns an error
// matching ErrNotHeld and touches no store. Releasing a lock that was lost
// returns an error matching ErrLockLost; if the store may still hold it, it is
// released by token first. A lock that expired and is now held by someone else
// is left alone, with an error matching ErrNotHeld.
func (l *Lock) Release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return fmt.Errorf("distlock: release %q: %w: already released", l.h.r.Key, ErrNotHeld)
	}
	return l.h.unref(ctx)
}

type holdState uint8

const (
	stateHeld holdState = iota
	stateLost
	stateReleased
)

// hold is one acquisition in the store, shared by its reentrant handles.
//
// It runs no goroutine of its own while nothing is due: the client's schedule
// runs tick at the next renewal, the validity deadline or the MaxHold cap,
// whichever comes first.
type hold struct {
	c        *Client
	r        Request
	token    string
	tokenID  string
	fence    uint64
	acquired time.Time
	ttl      time.Duration
	obsCtx   context.Context // observer context, without cancellation
	stopLost func() bool     // stops following driver.Grant.Lost; nil unless the backend signals loss
	running  sync.WaitGroup

	mu          sync.Mutex
	state       holdState
	lossReason  string
	deadline    time.Time
	nextRenew   time.Time
	retry       backoff
	refs        int
	cancelRenew context.CancelFunc // of the renewal in flight
	ctx         context.Context    // created on first use by Done or Context
	cancel      context.CancelCauseFunc

	due  time.Time // when tick next runs; guarded by the client's schedule
	slot int       // in the schedule's heap, -1 if not scheduled; likewise
}

// drift is the clock-drift margin taken off every validity period.
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// newHold registers a grant with the client and schedules its first tick.
func (c *Client) newHold(obsCtx context.Context, r Request, token string, g driver.Grant, sent time.Time) (*hold, error) {
	now := time.Now()
	h := &hold{
		c: c, r: r, token: token, fence: g.Fence, acquired: now, ttl: r.Lease + r.LockDelay,
		deadline: sent.Add(r.Lease - drift(r.Lease)), refs: 1, slot: -1,
	}
	if !h.deadline.After(now) {
		c.releaseAbandoned(&h.r, token)
		return nil, fmt.Errorf("distlock: lock %q: %w: granted after its validity had passed", r.Key, ErrNotAcquired)
	}
	if c.observer != nil {
		h.tokenID, h.obsCtx = tokenID(token), context.WithoutCancel(obsCtx)
	}
	if r.Watchdog {
		interval := r.renewInterval()
		h.nextRenew = sent.Add(interval)
		h.retry = backoff{min: max(interval/16, time.Millisecond), max: interval / 2}
	}

	h.mu.Lock()
	if g.Lost != nil {
		h.running.Add(1)
		h.stopLost = context.AfterFunc(g.Lost, func() {
			defer h.running.Done()
			h.markLost(LossStoreDeleted)
		})
	}
	c.sched.set(h, h.nextDueLocked())
	h.mu.Unlock()

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		h.mu.Lock()
		h.endLocked(stateReleased)
		h.mu.Unlock()
		h.running.Wait()
		c.releaseAbandoned(&h.r, token)
		return nil, fmt.Errorf("distlock: lock %q: %w", r.Key, ErrClosed)
	}
	c.holds[h] = struct{}{}
	if r.Reentrant {
		c.reentrant[ownedKey{r.Key, r.Meta.Owner}] = h
	}
	c.mu.Unlock()
	return h, nil
}

// nextDueLocked is when tick must next run.
func (h *hold) nextDueLocked() time.Time {
	due := h.deadline
	if !h.nextRenew.IsZero() && h.nextRenew.Before(due) {
		due = h.nextRenew
	}
	if h.r.MaxHold > 0 {
		if capAt := h.acquired.Add(h.r.MaxHold); capAt.Before(due) {
			due = capAt
		}
	}
	return due
}

// tick enforces MaxHold and the validity deadline and, with the watchdog on,
// renews the lease, retrying failures until the deadline.
func (h *hold) tick() {
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	h.running.Add(1)
	defer h.running.Done()
	now := time.Now()
	switch {
	case h.r.MaxHold > 0 && !now.Before(h.acquired.Add(h.r.MaxHold)):
		h.mu.Unlock()
		h.markLost(LossMaxHold)
		return
	case !now.Before(h.deadline):
		reason := LossExpired
		if h.r.Watchdog {
			reason = LossUnreachable
		}
		h.mu.Unlock()
		h.markLost(reason)
		return
	case h.nextRenew.IsZero() || now.Before(h.nextRenew):
		h.c.sched.set(h, h.nextDueLocked())
		h.mu.Unlock()
		return
	}

	rctx, cancel := context.WithDeadline(context.Background(), h.deadline)
	h.cancelRenew = cancel
	h.mu.Unlock()
	sent := time.Now()
	err := h.c.call(rctx, &h.r, "renew", func() error { return h.c.backend.Renew(rctx, h.r.Key, h.token, h.ttl) })
	cancel()

	if errors.Is(err, ErrNotHeld) {
		h.markLost(LossRenewRefused)
		return
	}
	h.mu.Lock()
	h.cancelRenew = nil
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	if err == nil {
		h.extendLocked(sent)
		h.nextRenew = sent.Add(h.r.renewInterval())
		h.retry.n = 0
	} else {
		h.nextRenew = time.Now().Add(h.retry.next())
	}
	h.c.sched.set(h, h.nextDueLocked())
	h.mu.Unlock()

	if err == nil {
		h.emit(Event{Kind: EventRenewed})
		return
	}
	h.emit(Event{Kind: EventRenewFailed, Err: err})
	if h.r.OnRenewFailure != nil {
		h.r.OnRenewFailure(err)
	}
}

// context returns the hold's context, creating it on first use.
func (h *hold) context() context.Context {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil {
		h.ctx, h.cancel = context.WithCancelCause(context.Background())
		if h.state != stateHeld {
			h.cancel(h.errLocked())
		}
	}
	return h.ctx
}

// errLocked is the error Err reports in the current state.
func (h *hold) errLocked() error {
	switch h.state {
	case stateLost:
		return h.lostErrorLocked()
	case stateReleased:
		return fmt.Errorf("distlock: lock %q: %w: released", h.r.Key, ErrNotHeld)
	}
	return nil
}

func (h *hold) lostErrorLocked() error {
	return fmt.Errorf("distlock: lock %q: %w (%s)", h.r.Key, ErrLockLost, h.lossReason)
}

// endLocked moves a held lock to state s and signals everyone waiting on it.
// It reports false if the lock was no longer held.
func (h *hold) endLocked(s holdState) bool {
	if h.state != stateHeld {
		return false
	}
	h.state = s
	h.c.sched.drop(h)
	if h.cancelRenew != nil {
		h.cancelRenew()
	}
	if h.stopLost != nil && h.stopLost() {
		h.running.Done() // the loss callback will not run
	}
	if h.cancel != nil {
		h.cancel(h.errLocked())
	}
	return true
}

// unregister removes h from the client's tables.
func (h *hold) unregister() {
	c := h.c
	c.mu.Lock()
	delete(c.holds, h)
	k := ownedKey{h.r.Key, h.r.Meta.Owner}
	if c.reentrant[k] == h {
		delete(c.reentrant, k)
	}
	c.mu.Unlock()
}

func (h *hold) validUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.deadline
}

// extendLocked moves the validity deadline after a renewal sent at sent.
func (h *hold) extendLocked(sent time.Time) {
	if d := sent.Add(h.r.Lease - drift(h.r.Lease)); d.After(h.deadline) {
		h.deadline = d
	}
}

func (h *hold) addRef() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateHeld {
		return false
	}
	h.refs++
	return true
}

// unref drops one handle; the last one releases the lock.
func (h *hold) unref(ctx context.Context) error {
	h.mu.Lock()
	h.refs--
	if h.refs > 0 {
		defer h.mu.Unlock()
		if h.state == stateLost {
			return h.lostErrorLocked()
		}
		return nil
	}
	h.mu.Unlock()
	return h.release(ctx)
}

// markLost reports the lock lost once, unless it was released first.
func (h *hold) markLost(reason string) {
	h.mu.Lock()
	h.lossReason = reason
	if !h.endLocked(stateLost) {
		h.mu.Unlock()
		return
	}
	h.mu.Unlock()
	h.unregister()
	h.emit(Event{Kind: EventLost, Reason: reason, Hold: time.Since(h.acquired)})
}

// release frees the lock in the store by token.
func (h *hold) release(ctx context.Context) error {
	h.mu.Lock()
	state, reason := h.state, h.lossReason
	var lostErr error
	switch state {
	case stateHeld:
		h.endLocked(stateReleased)
	case stateLost:
		lostErr = h.lostErrorLocked()
		h.state = stateReleased
	}
	h.mu.Unlock()
	if state == stateReleased {
		return fmt.Errorf("distlock: release %q: %w: already released", h.r.Key, ErrNotHeld)
	}
	h.running.Wait() // a renewal in flight was cancelled; let it finish

	if state == stateLost {
		if reason != LossRenewRefused && reason != LossStoreDeleted {
			// The store may still hold our token; free the key for others.
			_ = h.c.releaseByToken(ctx, &h.r, h.token)
		}
		h.emit(Event{Kind: EventReleased, Reason: ReleaseLost, Hold: time.Since(h.acquired)})
		return lostErr
	}

	err := h.c.releaseOrHand(ctx, &h.r, h.token)
	h.unregister()
	reason = ReleaseReleased
	switch {
	case errors.Is(err, ErrNotHeld):
		reason = ReleaseExpired
		err = fmt.Errorf("distlock: release %q: %w: the lease had expired", h.r.Key, err)
	case err != nil:
		err = fmt.Errorf("distlock: release %q: %w", h.r.Key, err)
	}
	h.emit(Event{Kind: EventReleased, Reason: reason, Hold: time.Since(h.acquired), Err: err})
	return err
}

// renew extends the lease once, on behalf of the holder.
func (h *hold) renew(ctx context.Context) error {
	h.mu.Lock()
	err := h.errLocked()
	h.mu.Unlock()
	if err != nil {
		return err
	}
	sent := time.Now()
	err = h.c.call(ctx, &h.r, "renew", func() error { return h.c.backend.Renew(ctx, h.r.Key, h.token, h.ttl) })
	switch {
	case err == nil:
		h.mu.Lock()
		h.extendLocked(sent)
		h.mu.Unlock()
		h.emit(Event{Kind: EventRenewed})
		return nil
	case errors.Is(err, ErrNotHeld):
		h.markLost(LossRenewRefused)
		return fmt.Errorf("distlock: renew %q: %w: %w", h.r.Key, ErrLockLost, err)
	default:
		h.emit(Event{Kind: EventRenewFailed, Err: err})
		return fmt.Errorf("distlock: renew %q: %w", h.r.Key, err)
	}
}

func (h *hold) emit(e Event) {
	if h.c.observer == nil {
		return
	}
	e.Fence, e.TokenID = h.fence, h.tokenID
	h.c.observe(h.obsCtx, &h.r, e)
}
