package distlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
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
func (l *Lock) Done() <-chan struct{} { return l.h.ctx.Done() }

// Err returns nil while the lock is held, an error matching ErrLockLost once
// it is lost (naming the reason), and one matching ErrNotHeld once released.
func (l *Lock) Err() error {
	if l.h.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.h.ctx)
}

// Context returns a context that is cancelled when the lock is lost or
// released; context.Cause gives the same error as Err.
func (l *Lock) Context() context.Context { return l.h.ctx }

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
type hold struct {
	c         *Client
	r         Request
	token     string
	tokenID   string
	fence     uint64
	acquired  time.Time
	ttl       time.Duration
	obsCtx    context.Context // observer context, without cancellation
	storeGone <-chan struct{}

	ctx         context.Context // cancelled when lost or released
	cancel      context.CancelCauseFunc
	stopMonitor context.CancelFunc
	monitorDone chan struct{}

	mu         sync.Mutex
	state      holdState
	lossReason string
	deadline   time.Time
	refs       int
}

// drift is the clock-drift margin taken off every validity period.
func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

// newHold registers a grant with the client and starts its monitor.
func (c *Client) newHold(obsCtx context.Context, r Request, token string, g Grant, sent time.Time) (*hold, error) {
	h := &hold{
		c: c, r: r, token: token, fence: g.Fence, acquired: time.Now(), ttl: r.Lease + r.LockDelay,
		obsCtx: context.WithoutCancel(obsCtx), storeGone: g.Lost,
		monitorDone: make(chan struct{}), deadline: sent.Add(r.Lease - drift(r.Lease)), refs: 1,
	}
	if c.observer != nil {
		h.tokenID = tokenID(token)
	}
	if !h.deadline.After(h.acquired) {
		c.releaseAbandoned(r.Key, token)
		return nil, fmt.Errorf("distlock: lock %q: %w: granted after its validity had passed", r.Key, ErrNotAcquired)
	}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	monCtx, stop := context.WithCancel(context.Background())
	h.stopMonitor = stop

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		stop()
		h.cancel(ErrClosed)
		c.releaseAbandoned(r.Key, token)
		return nil, fmt.Errorf("distlock: lock %q: %w", r.Key, ErrClosed)
	}
	c.holds[h] = struct{}{}
	if r.Reentrant {
		c.reentrant[ownedKey{r.Key, r.Meta.Owner}] = h
	}
	c.bg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.bg.Done()
		h.monitor(monCtx)
	}()
	return h, nil
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

// extend moves the validity deadline after a renewal sent at sent.
func (h *hold) extend(sent time.Time) {
	d := sent.Add(h.r.Lease - drift(h.r.Lease))
	h.mu.Lock()
	if d.After(h.deadline) {
		h.deadline = d
	}
	h.mu.Unlock()
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
	last, state := h.refs == 0, h.state
	h.mu.Unlock()
	if !last {
		if state == stateLost {
			return h.lostError()
		}
		return nil
	}
	return h.release(ctx)
}

// markLost reports the lock lost once, unless it was released first.
func (h *hold) markLost(reason string) {
	h.mu.Lock()
	if h.state != stateHeld {
		h.mu.Unlock()
		return
	}
	h.state, h.lossReason = stateLost, reason
	h.mu.Unlock()
	h.unregister()
	h.cancel(h.lostError())
	h.emit(Event{Kind: EventLost, Reason: reason, Hold: time.Since(h.acquired)})
}

func (h *hold) lostError() error {
	return fmt.Errorf("distlock: lock %q: %w (%s)", h.r.Key, ErrLockLost, h.lossReason)
}

// release frees the lock in the store by token.
func (h *hold) release(ctx context.Context) error {
	h.mu.Lock()
	state, reason := h.state, h.lossReason
	h.state = stateReleased
	h.mu.Unlock()
	h.stopMonitor()
	<-h.monitorDone

	switch state {
	case stateReleased:
		return fmt.Errorf("distlock: release %q: %w: already released", h.r.Key, ErrNotHeld)
	case stateLost:
		if reason != LossRenewRefused && reason != LossStoreDeleted {
			// The store may still hold our token; free the key for others.
			_ = h.c.releaseByToken(ctx, h.r.Key, h.token)
		}
		h.emit(Event{Kind: EventReleased, Reason: ReleaseLost, Hold: time.Since(h.acquired)})
		return h.lostError()
	}

	err := h.c.releaseByToken(ctx, h.r.Key, h.token)
	h.unregister()
	h.cancel(fmt.Errorf("distlock: lock %q: %w: released", h.r.Key, ErrNotHeld))
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
	state := h.state
	h.mu.Unlock()
	switch state {
	case stateLost:
		return h.lostError()
	case stateReleased:
		return fmt.Errorf("distlock: renew %q: %w: already released", h.r.Key, ErrNotHeld)
	}
	sent := time.Now()
	err := h.c.call(ctx, "renew", func() error { return h.c.backend.Renew(ctx, h.r.Key, h.token, h.ttl) })
	switch {
	case err == nil:
		h.extend(sent)
		h.emit(Event{Kind: EventRenewed})
		return nil
	case errors.Is(err, ErrNotHeld):
		h.markLost(LossRenewRefused)
		return errors.Join(h.lostError(), err)
	default:
		h.emit(Event{Kind: EventRenewFailed, Err: err})
		return fmt.Errorf("distlock: renew %q: %w", h.r.Key, err)
	}
}

// monitor runs while the lock is held: it renews (with the watchdog on),
// enforces MaxHold and the validity deadline, and watches the backend's loss
// signal. It returns when the lock is lost or ctx is cancelled by release.
func (h *hold) monitor(ctx context.Context) {
	defer close(h.monitorDone)
	deadline := time.NewTimer(time.Until(h.validUntil()))
	defer deadline.Stop()

	var renewC <-chan time.Time
	interval := h.r.renewInterval()
	retry := backoff{min: max(interval/16, time.Millisecond), max: interval / 2}
	renewT := time.NewTimer(interval)
	defer renewT.Stop()
	if h.r.Watchdog {
		renewC = renewT.C
	}
	var maxHoldC <-chan time.Time
	if h.r.MaxHold > 0 {
		t := time.NewTimer(time.Until(h.acquired.Add(h.r.MaxHold)))
		defer t.Stop()
		maxHoldC = t.C
	}

	for {
		select {
		case <-ctx.Done():
			return
		case <-h.storeGone:
			h.markLost(LossStoreDeleted)
			return
		case <-maxHoldC:
			h.markLost(LossMaxHold)
			return
		case <-deadline.C:
			if left := time.Until(h.validUntil()); left > 0 {
				deadline.Reset(left)
				continue
			}
			if h.r.Watchdog {
				h.markLost(LossUnreachable)
			} else {
				h.markLost(LossExpired)
			}
			return
		case <-renewC:
			rctx, cancel := context.WithDeadline(ctx, h.validUntil())
			sent := time.Now()
			err := h.c.call(rctx, "renew", func() error { return h.c.backend.Renew(rctx, h.r.Key, h.token, h.ttl) })
			cancel()
			switch {
			case err == nil:
				h.extend(sent)
				h.emit(Event{Kind: EventRenewed})
				retry.n = 0
				renewT.Reset(interval)
			case errors.Is(err, ErrNotHeld):
				h.markLost(LossRenewRefused)
				return
			case ctx.Err() != nil:
				return
			default:
				h.emit(Event{Kind: EventRenewFailed, Err: err})
				if h.r.OnRenewFailure != nil {
					h.r.OnRenewFailure(err)
				}
				renewT.Reset(retry.next())
			}
		}
	}
}

func (h *hold) emit(e Event) {
	if h.c.observer == nil {
		return
	}
	e.Fence, e.TokenID = h.fence, h.tokenID
	h.c.observe(h.obsCtx, &h.r, e)
}
