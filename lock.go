package distlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
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
//
// Err reads the clock itself: past the validity deadline it reports the loss
// even if the client's timer has not run yet (after a long pause, say), so a
// check right before a write is as fresh as a check can be. It still cannot
// see a pause that begins after it returns; only a fence checked by the
// resource closes that gap.
func (l *Lock) Err() error {
	h := l.h
	h.mu.Lock()
	if h.state == stateHeld {
		if reason := h.dueLossLocked(time.Now()); reason != "" {
			h.mu.Unlock()
			h.markLost(reason)
			h.mu.Lock()
		}
	}
	defer h.mu.Unlock()
	return h.errLocked()
}

// Context returns a context that is cancelled when the lock is lost or
// released; context.Cause gives the same error as Err.
func (l *Lock) Context() context.Context { return l.h.context() }

// ReleaseRequested returns a channel that is closed once somebody asked the
// holder to release the lock (Client.RequestRelease), so that it can finish
// its unit of work and Release instead of being force-released mid-write.
// The lock stays held and renewed until then; ReleaseReason says why. On a
// backend that cannot tell (see driver.ReleaseRequester) it is never closed.
func (l *Lock) ReleaseRequested() <-chan struct{} { return l.h.requestedChan() }

// ReleaseReason returns the reason of the request that closed
// ReleaseRequested, and "" before one came.
func (l *Lock) ReleaseReason() string {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	return l.h.requestReason
}

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
		return keyErr("renew", l.h.r.Key, errAlreadyReleased)
	}
	return l.h.renew(ctx, "renew", 0)
}

// Extend renews the lock now with a new lease, which later renewals keep
// (redsync's Extend). The lease is validated like any lease (at least
// MinLease, at most the client's WithMaxLease, longer than an explicit renew
// interval) and a refused one changes nothing. A shorter lease moves the
// validity deadline closer. Errors are those of Renew.
func (l *Lock) Extend(ctx context.Context, lease time.Duration) error {
	if l.released.Load() {
		return keyErr("extend", l.h.r.Key, errAlreadyReleased)
	}
	if err := l.h.r.validateLease(lease, l.h.c.maxLease); err != nil {
		return keyErr("extend", l.h.r.Key, err)
	}
	return l.h.renew(ctx, "extend", lease)
}

var errAlreadyReleased = fmt.Errorf("%w: already released", ErrNotHeld)

// Release releases the lock. Releasing a handle twice returns an error
// matching ErrNotHeld and touches no store. Releasing a lock that was lost
// returns an error matching ErrLockLost; if the store may still hold it, it is
// released by token first. A lock that expired and is now held by someone else
// is left alone, with an error matching ErrNotHeld. A release retried after a
// failure whose reply never came, that finds the key free while the lease
// still runs, succeeds: the failed attempt released it.
func (l *Lock) Release(ctx context.Context) error {
	if !l.released.CompareAndSwap(false, true) {
		return keyErr("release", l.h.r.Key, errAlreadyReleased)
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
//
// Callbacks (observers, OnRenewFailure) are called with no lock held and
// outside any renewal, so they may call Release, Renew, Extend and Err.
type hold struct {
	c        *Client
	token    string
	tokenID  string
	fence    uint64
	acquired time.Time
	obsCtx   context.Context // observer context, without cancellation
	renewing sync.WaitGroup  // the watchdog's renewal in flight
	// renewMu serialises renewals (the watchdog's, Renew, Extend), so that
	// one sent with an older lease cannot land after one with a newer lease.
	renewMu sync.Mutex

	mu         sync.Mutex
	r          Request       // Lease and ttl change with Extend; the rest is fixed
	ttl        time.Duration // the store-side time to live: lease plus lock-delay
	state      holdState
	lossReason string
	// reportingLoss is set while observe.Lost is being reported; a release in
	// that time leaves its observe.Released in releasedAfterLoss, reported next.
	reportingLoss     bool
	releasedAfterLoss *observe.Event
	deadline          time.Time
	nextRenew         time.Time
	retry             backoff
	refs              int
	stopLost          func() bool        // stops following Grant.Lost; nil unless the backend signals loss
	stopRequested     func() bool        // stops following Grant.Requested; nil unless the backend tells
	requested         chan struct{}      // created on first use by ReleaseRequested; closed once asked
	requestReason     string             // set once asked; never "" then
	cancelRenew       context.CancelFunc // of the renewal in flight
	ctx               context.Context    // created on first use by Done or Context
	cancel            context.CancelCauseFunc

	due  time.Time // when tick next runs; guarded by the client's schedule
	slot int       // in the schedule's heap, -1 if not scheduled; likewise
}

// drift is the clock-drift margin taken off every validity period.
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// newHold registers a grant with the client. The caller reports the
// acquisition, then calls arm, so that no loss can be reported (or
// unregister the hold) before the hold is registered and acquired.
func (c *Client) newHold(obsCtx context.Context, r Request, token string, g driver.Grant, sent time.Time) (*hold, error) {
	now := time.Now()
	valid := r.grantedLease(r.Lease, g.TTL)
	h := &hold{
		c: c, r: r, token: token, fence: g.Fence, acquired: now, ttl: r.Lease + r.LockDelay,
		deadline: sent.Add(valid - drift(valid)), refs: 1, slot: -1,
	}
	if !h.deadline.After(now) {
		c.releaseAbandoned(&h.r, token)
		return nil, errLateGrant
	}
	if c.observer != nil {
		h.tokenID, h.obsCtx = tokenID(token), context.WithoutCancel(obsCtx)
	}
	if r.Watchdog {
		interval := r.renewInterval()
		h.nextRenew = sent.Add(interval)
		h.retry = newRetry(interval)
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.releaseAbandoned(&h.r, token)
		return nil, ErrClosed
	}
	c.holds[h] = struct{}{}
	if r.Reentrant {
		c.reentrant[ownedKey{r.Key, r.Meta.Owner}] = h
	}
	c.mu.Unlock()
	return h, nil
}

// newRetry is the backoff between failed renewals for a renew interval: it
// starts at a sixteenth of the interval and grows to half of it.
func newRetry(interval time.Duration) backoff {
	return backoff{min: max(interval/16, time.Millisecond), max: interval / 2}
}

// lostReason is the loss reason of a Grant's ended Lost context: the
// backend's *driver.Loss, or a loss the store told of.
func lostReason(lost context.Context) string {
	var loss *driver.Loss
	if errors.As(context.Cause(lost), &loss) {
		switch loss.Reason {
		case driver.LossDeleted:
			return observe.LossDeleted
		case driver.LossTaken:
			return observe.LossTaken
		}
	}
	return observe.LossStoreDeleted
}

// arm starts following the backend's loss and release-request signals and
// schedules the first tick, unless the hold already ended.
func (h *hold) arm(g driver.Grant) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateHeld {
		return
	}
	if g.Lost != nil {
		h.stopLost = context.AfterFunc(g.Lost, func() {
			if h.c.enterBackground() {
				defer h.c.bg.Done()
				h.markLost(lostReason(g.Lost)) // at once: the store may be cut off
			}
		})
	}
	if asked := g.Requested; asked != nil {
		h.stopRequested = context.AfterFunc(asked, func() {
			if h.c.enterBackground() {
				defer h.c.bg.Done()
				var req *driver.ReleaseRequest
				if !errors.As(context.Cause(asked), &req) {
					req = &driver.ReleaseRequest{Reason: "unknown"}
				}
				h.markRequested(req.Reason)
			}
		})
	}
	h.c.sched.set(h, h.nextDueLocked())
}

// markRequested records the first request to release the held lock, closes
// ReleaseRequested's channel and reports observe.ReleaseRequested.
func (h *hold) markRequested(reason string) {
	h.mu.Lock()
	if h.state != stateHeld || h.requestReason != "" {
		h.mu.Unlock()
		return
	}
	h.requestReason = reason
	if h.requested != nil {
		close(h.requested)
	}
	h.mu.Unlock()
	h.emit(observe.Event{Kind: observe.ReleaseRequested, Reason: reason, Hold: time.Since(h.acquired)})
}

// requestedChan returns ReleaseRequested's channel, creating it on first use.
func (h *hold) requestedChan() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.requested == nil {
		h.requested = make(chan struct{})
		if h.requestReason != "" {
			close(h.requested)
		}
	}
	return h.requested
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

// dueLossLocked returns why the hold is lost at now, or "" while it is valid.
func (h *hold) dueLossLocked(now time.Time) string {
	switch {
	case h.r.MaxHold > 0 && !now.Before(h.acquired.Add(h.r.MaxHold)):
		return observe.LossMaxHold
	case !now.Before(h.deadline) && h.r.Watchdog:
		return observe.LossUnreachable
	case !now.Before(h.deadline):
		return observe.LossExpired
	}
	return ""
}

// tick enforces MaxHold and the validity deadline and, with the watchdog on,
// renews the lease, retrying failures until the deadline.
func (h *hold) tick() {
	if !h.c.enterBackground() {
		return // the client is closing and releases its holds itself
	}
	defer h.c.bg.Done()
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	now := time.Now()
	if reason := h.dueLossLocked(now); reason != "" {
		h.mu.Unlock()
		h.markLost(reason)
		return
	}
	if h.nextRenew.IsZero() || now.Before(h.nextRenew) {
		h.c.sched.set(h, h.nextDueLocked())
		h.mu.Unlock()
		return
	}

	rctx, cancel := context.WithDeadline(context.Background(), h.deadline)
	h.cancelRenew = cancel
	h.renewing.Add(1)
	h.mu.Unlock()
	h.renewMu.Lock()
	h.mu.Lock()
	lease, ttl := h.r.Lease, h.ttl // as an Extend that ran meanwhile left them
	h.mu.Unlock()
	failpoint("renew", h.r.Key)
	sent := time.Now()
	granted, err := h.c.renewStore(rctx, h.r.Key, h.token, ttl)
	h.renewMu.Unlock()
	h.c.observeCall(rctx, &h.r, "renew", sent, err) // with the renewals let go: an observer may renew
	cancel()

	h.mu.Lock()
	h.cancelRenew = nil
	h.renewing.Done()
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	if errors.Is(err, ErrNotHeld) {
		h.mu.Unlock()
		h.markLost(h.lossCause(observe.LossRenewRefused))
		return
	}
	if err == nil {
		h.confirmLocked(sent, lease, granted)
		h.nextRenew = sent.Add(h.r.renewInterval())
		h.retry.n = 0
	} else {
		h.nextRenew = time.Now().Add(h.retry.next())
	}
	h.c.sched.set(h, h.nextDueLocked())
	h.mu.Unlock()

	if err == nil {
		h.emit(observe.Event{Kind: observe.Renewed})
		return
	}
	h.emit(observe.Event{Kind: observe.RenewFailed, Err: err})
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
		return keyErr(h.c.acquireOp, h.r.Key, fmt.Errorf("%w: released", ErrNotHeld))
	}
	return nil
}

func (h *hold) lostErrorLocked() error {
	return keyErr(h.c.acquireOp, h.r.Key, fmt.Errorf("%w (%s)", ErrLockLost, h.lossReason))
}

// endLocked moves a held lock to state s and stops its renewals. Unless
// quiet, it also signals everyone waiting on Done; markLost does that itself
// once it has reported the loss. It reports false if the lock was no longer
// held.
func (h *hold) endLocked(s holdState, quiet bool) bool {
	if h.state != stateHeld {
		return false
	}
	h.state = s
	h.c.sched.drop(h)
	if h.cancelRenew != nil {
		h.cancelRenew()
	}
	if h.stopLost != nil {
		h.stopLost()
	}
	if h.stopRequested != nil {
		h.stopRequested()
	}
	if h.cancel != nil && !quiet {
		h.cancel(h.errLocked())
	}
	return true
}

// storeMayHold reports whether the store may still hold the token of a lock
// lost for reason, so that it must be released by token.
func storeMayHold(reason string) bool {
	switch reason {
	case observe.LossRenewRefused, observe.LossStoreDeleted, observe.LossTaken, observe.LossDeleted:
		return false
	}
	return true
}

// lossReadTimeout bounds the read of the store that tells why a renewal
// was refused: the loss is reported after it.
const lossReadTimeout = 250 * time.Millisecond

// lossCause tells why the store refused to renew the lock, which it said
// with reason: another holder has the key (observe.LossTaken) or nobody
// does (observe.LossDeleted), as one read of the store, which has just
// answered, says; reason itself if the store cannot be read within
// lossReadTimeout, or for a permit or a read-write hold, whose key has
// several holders. A backend's own loss signal is reported at once, with
// no read: it may come from a store that is cut off (a session's expiry).
func (h *hold) lossCause(reason string) string {
	if h.c.acquireOp != "lock" {
		return reason
	}
	ctx, cancel := context.WithTimeout(context.Background(), lossReadTimeout)
	defer cancel()
	info, err := h.c.backend.Inspect(ctx, h.r.Key)
	switch {
	case err != nil:
		return reason
	case !info.Held:
		return observe.LossDeleted
	case info.Fence != h.fence:
		return observe.LossTaken
	}
	return reason
}

// unregister removes h from the client's reentrancy table and, if all is
// set, from its holds; a lost hold that the store may still hold stays there
// until Release or Close frees it by token.
func (h *hold) unregister(all bool) {
	c := h.c
	c.mu.Lock()
	if all {
		delete(c.holds, h)
	}
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

// confirmLocked moves the validity deadline after a renewal with lease sent
// at sent, which the store kept for granted: later, or closer if the store
// gave less than the lease and lock-delay asked (a lock service's hold cap),
// since the renewal replaced the time the store had left.
func (h *hold) confirmLocked(sent time.Time, lease, granted time.Duration) {
	if valid := h.r.grantedLease(lease, granted); valid < lease {
		h.deadline = sent.Add(valid - drift(valid))
		return
	}
	if d := sent.Add(lease - drift(lease)); d.After(h.deadline) {
		h.deadline = d
	}
}

// grantedLease is the validity a store's time to live leaves of lease: all
// of it, unless the store gave less than lease plus the lock-delay (ttl,
// zero if the store did not say).
func (r *Request) grantedLease(lease, ttl time.Duration) time.Duration {
	if ttl > 0 && ttl-r.LockDelay < lease {
		return ttl - r.LockDelay
	}
	return lease
}

// renewStore renews key for token with ttl and returns the time to live the
// store gave: ttl, or less from a backend whose store may give less
// (driver.TTLRenewer).
func (c *Client) renewStore(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	if tr, ok := c.backend.(driver.TTLRenewer); ok {
		return tr.RenewTTL(ctx, key, token, ttl)
	}
	return ttl, c.backend.Renew(ctx, key, token, ttl)
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

// markLost reports the lock lost once, for the first reason, unless it was
// released first.
//
// Observers get observe.Lost before Done closes, so a holder that waits on Done
// and then releases is reported in that order; a Release made while the loss
// is being reported (by an observer, or after Err saw it) has its
// observe.Released reported right after observe.Lost.
func (h *hold) markLost(reason string) {
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	h.lossReason = reason
	h.endLocked(stateLost, true)
	h.reportingLoss = true
	lostErr := h.lostErrorLocked()
	h.mu.Unlock()
	h.unregister(!storeMayHold(reason))
	h.emit(observe.Event{Kind: observe.Lost, Reason: reason, Hold: time.Since(h.acquired)})

	h.mu.Lock()
	h.reportingLoss = false
	released := h.releasedAfterLoss
	h.releasedAfterLoss = nil
	if h.cancel != nil {
		h.cancel(lostErr)
	}
	h.mu.Unlock()
	if released != nil {
		h.emit(*released)
	}
}

// release frees the lock in the store by token.
func (h *hold) release(ctx context.Context) error {
	h.mu.Lock()
	state, reason, deadline := h.state, h.lossReason, h.deadline
	var lostErr error
	switch state {
	case stateHeld:
		h.endLocked(stateReleased, false)
	case stateLost:
		lostErr = h.lostErrorLocked()
		h.state = stateReleased
	}
	h.mu.Unlock()
	if state == stateReleased {
		return keyErr("release", h.r.Key, errAlreadyReleased)
	}
	h.renewing.Wait() // a renewal in flight was cancelled; let it finish

	if state == stateLost {
		if storeMayHold(reason) {
			// The store may still hold our token; free the key for others.
			_ = h.c.releaseByToken(ctx, &h.r, h.token, nil)
		}
		h.unregister(true)
		e := observe.Event{Kind: observe.Released, Reason: observe.ReleaseLost, Hold: time.Since(h.acquired)}
		h.mu.Lock()
		if h.reportingLoss {
			h.releasedAfterLoss = &e
			h.mu.Unlock()
			return lostErr
		}
		h.mu.Unlock()
		h.emit(e)
		return lostErr
	}

	err := h.c.releaseOrHand(ctx, &h.r, h.token)
	h.unregister(true)
	reason = observe.ReleaseReleased
	switch {
	case errors.Is(err, errMayHaveReleased) && time.Now().Before(deadline):
		// Within the lease only a release frees the key: the attempt whose
		// reply was lost (or an operator's ForceRelease).
		err = nil
	case errors.Is(err, errMayHaveReleased):
		reason = observe.ReleaseExpired
		err = keyErr("release", h.r.Key, err)
	case errors.Is(err, ErrNotHeld):
		reason = observe.ReleaseExpired
		err = keyErr("release", h.r.Key, fmt.Errorf("%w: the lease had expired", err))
	case err != nil:
		err = keyErr("release", h.r.Key, err)
	}
	h.emit(observe.Event{Kind: observe.Released, Reason: reason, Hold: time.Since(h.acquired), Err: err})
	return err
}

// renew renews the lease once, on behalf of the holder: with the lease the
// lock has if lease is 0, else with lease, which the lock then keeps.
func (h *hold) renew(ctx context.Context, op string, lease time.Duration) error {
	sent, at, err := h.renewOnce(ctx, lease)
	if !sent {
		return err // the hold had ended
	}
	h.c.observeCall(ctx, &h.r, "renew", at, err) // the renewals are let go: an observer may renew
	switch {
	case err == nil:
		h.emit(observe.Event{Kind: observe.Renewed})
		return nil
	case errors.Is(err, ErrNotHeld):
		h.markLost(h.lossCause(observe.LossRenewRefused))
		return keyErr(op, h.r.Key, causedBy(ErrLockLost, err))
	default:
		h.emit(observe.Event{Kind: observe.RenewFailed, Err: err})
		return keyErr(op, h.r.Key, err)
	}
}

// renewOnce sends one renewal, serialised with the others, unless the hold
// ended (sent is false then), and moves the validity deadline by its
// outcome; at is when it was sent. Callbacks, the store-call event among
// them, are left to the caller.
func (h *hold) renewOnce(ctx context.Context, lease time.Duration) (sent bool, at time.Time, _ error) {
	h.renewMu.Lock()
	defer h.renewMu.Unlock()
	h.mu.Lock()
	if err := h.errLocked(); err != nil {
		h.mu.Unlock()
		return false, time.Time{}, err
	}
	current := h.r.Lease
	if lease == 0 {
		lease = current
	}
	ttl := lease + h.r.LockDelay
	h.mu.Unlock()
	at = time.Now()
	granted, err := h.c.renewStore(ctx, h.r.Key, h.token, ttl)

	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err == nil:
		if lease != current {
			h.r.Lease, h.ttl = lease, ttl
			h.deadline = at // a shorter lease moves it closer
		}
		h.confirmLocked(at, lease, granted)
	case lease < current && !errors.Is(err, ErrNotHeld):
		// The store may have taken the shorter lease: count with it.
		if d := at.Add(lease - drift(lease)); d.Before(h.deadline) {
			h.deadline = d
		}
	}
	if h.state == stateHeld {
		if err == nil && h.r.Watchdog {
			h.nextRenew = at.Add(h.r.renewInterval())
			h.retry = newRetry(h.r.renewInterval())
		}
		h.c.sched.set(h, h.nextDueLocked())
	}
	return true, at, err
}

func (h *hold) emit(e observe.Event) {
	if h.c.observer == nil {
		return
	}
	e.Fence, e.TokenID = h.fence, h.tokenID
	h.c.observe(h.obsCtx, &h.r, e)
}
