package redislock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/distlock/distlock/driver"
)

// AcquireWait takes req.Key, waiting for it in the key's queue in Redis, and
// returns once it is granted or ctx ends (driver.Waiter).
//
// A wait starts with the same attempt as Acquire, unless another waiter of
// the backend waits for the key or had to queue for it within the last
// second. A backend's waiters for a key line up in
// the backend, in arrival order. Only the first of them waits in Redis: if
// the key is held, its step queues it, with an entry that expires unless the waiter refreshes it
// (WithWaiterTimeout), which a live waiter does every fifth to third of
// that time, jittered. A release passes the key to the first live waiter
// in the Redis queue only: it grants it the key in the release's own script
// and tells its backend alone, on that backend's channel, the fence (or,
// for the releasing backend's own waiter, hands the grant over in process).
// The waiter's lease counts from its last refused step, which ran before
// the grant. The refresh is also the fallback for a lost notice, and the
// first waiter looks again when the holder's lease runs out. A waiter whose
// process died is passed over at once: its connections closed, so nobody
// heard the notice.
//
// A release by this backend hands the key straight to the next waiter in
// the backend's own line, in the release's own script; while other clients'
// waiters are queued in Redis, it does so at most 16 times in a row before
// it releases the key to the first of them.
//
// Store failures are retried while the wait lasts. When ctx ends the waiter
// leaves the queue, freeing the key if it was granted to it meanwhile, and returns an error matching driver.ErrNotAcquired (joined
// with ctx's error), or driver.ErrClosed if the backend was closed; if the
// last step or leaving failed, it returns that store error instead.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	g, acked, err := b.acquireWait(ctx, req)
	if err == nil && b.acks() && !acked {
		err = b.confirm(ctx, req.Key, req.Token, req.TTL)
	}
	return b.granted(g, err, req)
}

// acquireWait is AcquireWait without the grant's Lost context and, unless
// it reports acked, without the replicas' acknowledgement of the grant
// that WithReplicaAck asks for.
func (b *Backend) acquireWait(ctx context.Context, req driver.AcquireRequest) (_ driver.Grant, acked bool, _ error) {
	if err := validRequest(req.Key, req.Token, &req.TTL); err != nil {
		return driver.Grant{}, false, driver.Wrap("redislock", err)
	}
	meta, err := encodeMeta(req.Meta)
	if err != nil {
		return driver.Grant{}, false, driver.Wrap("redislock", err)
	}
	if !b.enterWait() {
		return driver.Grant{}, false, driver.ErrClosed
	}
	defer b.waits.Done()
	if b.inbox.idle(req.Key) {
		// No waiter of this backend waits for the key, nor had to queue for
		// it lately: try it as Acquire does, before paying for a place in
		// the queue. Most waits end here.
		sent := time.Now()
		fence, err := b.grant(ctx, req, "")
		var unacked *ReplicaAckError
		switch {
		case err == nil && fence > 0:
			return driver.Grant{Fence: uint64(fence), Sent: sent}, true, nil
		case errors.As(err, &unacked):
			return driver.Grant{}, false, err // granted, but not kept: waiting on would only repeat it
		case errors.Is(err, driver.ErrClosed):
			return driver.Grant{}, false, driver.Wrap("redislock", err)
		} // refused, or failed: the queue's steps go on (a step finds the key if the attempt took it)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(b.closing, cancel)()
	ttl := millis(req.TTL)
	next := nextWaiter{token: req.Token, ttl: ttl, meta: meta, member: b.id + "|" + ttl + "|" + req.Token}
	mb, err := b.inbox.join(req.Key, next)
	if err != nil {
		return driver.Grant{}, false, driver.Wrap("redislock", err)
	}
	w := &queueWaiter{b: b, key: req.Key, ttl: req.TTL, next: next, mb: mb, keys: b.keysFor(req.Key).all(),
		args: []string{b.channels, req.Token, ttl, meta, next.member, millis(b.waiterTimeout), "", ""}}
	select {
	case <-mb.head:
	case <-ctx.Done():
		g, err := w.giveUp(ctx, false, nil)
		return g, false, err
	}
	g, err := w.run(ctx)
	return g, false, err
}

// queueWaiter is one AcquireWait.
type queueWaiter struct {
	b    *Backend
	key  string
	ttl  time.Duration
	next nextWaiter // its token and entry (queue.lua), and what a handoff needs
	keys []string
	args []string // wait.lua's; the last two say whether it may have queued, and may queue
	mb   *mailbox
}

// Pauses of a waiter. While notices cannot reach it (the subscription is not
// confirmed yet, or was lost), it looks again as the client core's poll
// would; after a store failure it backs off further.
var (
	unheardPoll  = backoff{min: 5 * time.Millisecond, max: 100 * time.Millisecond}
	failureRetry = backoff{min: 10 * time.Millisecond, max: time.Second}
)

// run takes steps, once the waiter is first in its backend's line, until
// the key is granted or ctx ends.
func (w *queueWaiter) run(ctx context.Context) (driver.Grant, error) {
	var (
		queued  bool  // a step queued the waiter, or may have
		lastErr error // of the last step, if it failed
		unheard = unheardPoll
		retry   = failureRetry
		// The waiter before it left with the key, which this backend hands
		// on when it releases it: wait for that before queueing in Redis.
		awaitHandoff = w.mb.afterGrant
	)
	for {
		var pause time.Duration
		if awaitHandoff {
			awaitHandoff = false
			pause = w.b.refresh()
		} else {
			sent := time.Now()
			st, err := w.step(ctx, queued, w.b.inbox.listening())
			switch {
			case err == nil && st.fence > 0:
				w.b.inbox.leave(w.mb, true)
				return driver.Grant{Fence: st.fence, Sent: sent}, nil
			case errors.Is(err, driver.ErrClosed) && w.b.closing.Err() != nil:
				return w.giveUp(ctx, true, nil) // Close: leave the queue while it waits
			case errors.Is(err, driver.ErrClosed): // the client was closed: nothing more to send
				w.b.inbox.leave(w.mb, false)
				return driver.Grant{}, err
			case err != nil && driver.Ended(ctx):
				// Cut short by the wait's end, which says nothing of the
				// store; it may have queued.
				return w.giveUp(ctx, true, lastErr)
			case err != nil:
				queued, lastErr = true, err // it may have queued before failing
				pause = retry.next()
			case st.place < 0: // not queued: its backend does not listen yet
				lastErr = nil
				if w.b.inbox.listen(ctx) {
					continue // listens now: queue at once
				}
				pause = unheard.next()
			default:
				queued, lastErr = true, nil
				retry = failureRetry
				w.b.inbox.refusedAt(w.mb, sent)
				if w.b.inbox.listen(ctx) {
					pause = w.b.refresh()
					if st.place == 0 && st.pttl > 0 {
						// First in line: look again as soon as the holder's
						// lease runs out.
						pause = min(pause, time.Duration(st.pttl)*time.Millisecond+time.Millisecond)
					}
				} else {
					pause = unheard.next()
				}
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return w.giveUp(ctx, queued, lastErr)
		case g := <-w.mb.granted:
			t.Stop()
			if time.Since(g.Sent) > w.ttl/8 {
				// Granted long after the step it counts from: a step now,
				// which finds the key granted, renews it in full.
				awaitHandoff = false
				continue
			}
			w.b.inbox.leave(w.mb, true)
			return g, nil
		case <-w.mb.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// stepResult is what wait.lua answered.
type stepResult struct {
	fence uint64 // > 0: granted
	pttl  int64  // ms the lock's value lives, when refused
	place int64  // in the queue, when refused: 0 is first
}

// step runs wait.lua once. queued says whether an earlier step may have
// queued the waiter; listening, whether it may queue now: only once its
// backend listens for the notices, so that a turn never comes unheard.
func (w *queueWaiter) step(ctx context.Context, queued, listening bool) (stepResult, error) {
	w.args[len(w.args)-2], w.args[len(w.args)-1] = flag(queued), flag(listening)
	r, err := w.b.evalStrings(ctx, scriptWait, w.keys, w.args...)
	var st stepResult
	switch {
	case err != nil:
	case len(r) == 1:
		st.fence, err = strconv.ParseUint(r[0], 10, 64)
	case len(r) == 3:
		st.pttl, err = strconv.ParseInt(r[1], 10, 64)
		if err == nil {
			st.place, err = strconv.ParseInt(r[2], 10, 64)
		}
	default:
		err = fmt.Errorf("wait script returned %d values", len(r))
	}
	if err != nil {
		return stepResult{}, driver.Wrap("redislock", err)
	}
	return st, nil
}

// giveUp ends a wait whose context ended: it leaves its backend's line
// and, if it may have queued in Redis or was handed the key meanwhile, the
// Redis queue, freeing the key if it was granted to the waiter; with a
// context of its own, since ctx is done. It says why the wait ended.
func (w *queueWaiter) giveUp(ctx context.Context, queued bool, last error) (driver.Grant, error) {
	w.b.inbox.leave(w.mb, false) // nothing is handed to it after this
	if len(w.mb.granted) > 0 {
		queued = true // handed the key just before: free it
	}
	if queued {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.b.timeout)
		defer cancel()
		if err := w.b.leave(lctx, w.keys, w.next); err != nil {
			// The key may be granted to the token: the caller releases it.
			return driver.Grant{}, fmt.Errorf("redislock: leave the queue: %w", errors.Join(err, last))
		}
	}
	switch {
	case w.b.closing.Err() != nil:
		return driver.Grant{}, driver.ErrClosed
	case last != nil:
		return driver.Grant{}, last // the store failed: the caller releases the token
	}
	return driver.Grant{}, errors.Join(driver.ErrNotAcquired, ctx.Err())
}

// leave runs leave.lua for a waiter, even while Close waits for the waits.
func (b *Backend) leave(ctx context.Context, keys []string, n nextWaiter) error {
	return b.runClosing(ctx, func(ctx context.Context) error {
		_, err := b.st.evalInt(ctx, scriptLeave, keys, b.channels, n.token, n.member)
		return err
	})
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return ""
}

// refresh returns how long a waiter pauses, when notices reach it, before it
// refreshes its entry: a fifth to a third of the waiter timeout, jittered.
func (b *Backend) refresh() time.Duration {
	lo := b.waiterTimeout / 5
	return lo + rand.N(b.waiterTimeout/3-lo+1)
}

// backoff yields capped, fully jittered exponential pauses; copies start
// over.
type backoff struct {
	min, max time.Duration
	n        int
}

// next returns the next pause, between min/2 and the current ceiling.
func (b *backoff) next() time.Duration {
	ceil := min(b.min<<min(b.n, 16), b.max)
	b.n++
	return b.min/2 + rand.N(ceil-b.min/2+1)
}
