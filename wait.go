package distlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// acquireWaiting takes the lock within r.Wait and ctx, using the backend's
// native queue if it has one; otherwise this client's waiters for the key
// line up first come, first served, and the one at the head retries on the
// backend's release notices or a capped jittered backoff poll.
// On return req.Token is the token of the grant.
func (c *Client) acquireWaiting(ctx context.Context, r *Request, req *driver.AcquireRequest) (driver.Grant, time.Time, error) {
	if r.Wait == 0 {
		g, sent, err := c.attempt(ctx, r, req)
		if errors.Is(err, ErrNotAcquired) {
			err = ErrNotAcquired
		}
		return g, sent, err
	}
	wctx := ctx
	if r.Wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, r.Wait)
		defer cancel()
	}
	notAcquired := func(last error) error {
		if errors.Is(context.Cause(wctx), ErrClosed) {
			return fmt.Errorf("%w: the wait was ended by Close", ErrClosed)
		}
		return errors.Join(ErrNotAcquired, ctx.Err(), last)
	}

	var stopOnClose func()
	if w, ok := c.backend.(driver.Waiter); ok {
		wctx, stopOnClose = c.untilClosed(wctx)
		defer stopOnClose()
		return c.waitNatively(wctx, r, req, w, notAcquired)
	}

	var lastErr error // the last store failure met
	if c.lines.empty(r.Key) {
		// Nobody of ours waits: try before paying for a place in the line.
		g, sent, err := c.attempt(wctx, r, req)
		switch {
		case err == nil:
			return g, sent, nil
		case permanent(err) && wctx.Err() == nil:
			return driver.Grant{}, sent, err // no wait mends it
		case !errors.Is(err, ErrNotAcquired) && !cutByWaitEnd(wctx, err):
			lastErr = err
		}
	}
	wctx, stopOnClose = c.untilClosed(wctx) // only now: a free key costs no registration
	defer stopOnClose()
	turn := c.lines.join(*req, r.keepToken)
	granted := false
	defer func() {
		c.lines.leave(r.Key, turn, granted)
		if h, ok := turn.takeHanded(); ok && h.token != req.Token {
			c.releaseAbandoned(r, h.token) // handed over as the wait ended
		}
	}()
	// handed returns the grant a local release handed over, if any.
	handed := func() (driver.Grant, time.Time, bool) {
		h, ok := turn.takeHanded()
		if ok {
			req.Token, granted = h.token, true
		}
		return h.grant, h.sent, ok
	}
	select {
	case <-turn.head:
	case <-wctx.Done():
		return driver.Grant{}, time.Now(), notAcquired(nil)
	}

	bo := backoff{min: time.Millisecond, max: 50 * time.Millisecond}
	notifier, _ := c.backend.(driver.Notifier)
	_, handsOff := c.backend.(driver.Handoff)
	var (
		notices <-chan struct{}
		watched bool // Watch is tried once: a backend that cannot notify is polled
		// The waiter before us left with the key, which our client hands
		// over on release: an attempt now would only load the store.
		awaitHandoff = handsOff && turn.behindGrant
	)
	for {
		if !awaitHandoff {
			g, sent, err := c.attempt(wctx, r, req)
			if err == nil {
				granted = true
				return g, sent, nil
			}
			if !errors.Is(err, ErrNotAcquired) {
				if r.keepToken {
					return driver.Grant{}, sent, err // the caller decides about its token
				}
				if permanent(err) && wctx.Err() == nil {
					return driver.Grant{}, sent, err // no wait mends it
				}
				if !cutByWaitEnd(wctx, err) {
					lastErr = err // a store failure: keep trying while the wait lasts
				}
			}
			if g, sent, ok := handed(); ok {
				return g, sent, nil
			}
			if wctx.Err() != nil {
				return driver.Grant{}, sent, notAcquired(lastErr)
			}
		}
		if notifier != nil && !watched {
			// Subscribe only once the key turned out to be held, then try
			// again at once: a release before the subscription has no notice.
			watched = true
			if ch, stop, err := notifier.Watch(wctx, r.Key); err == nil {
				defer stop()
				notices = ch
				// Notices do the work; the poll only catches lost notices and expiries.
				bo = backoff{min: 5 * time.Millisecond, max: 100 * time.Millisecond}
				if !awaitHandoff {
					continue
				}
			}
		}
		awaitHandoff = false
		t := time.NewTimer(bo.next())
		select {
		case <-wctx.Done():
			t.Stop()
			if g, sent, ok := handed(); ok {
				return g, sent, nil
			}
			return driver.Grant{}, time.Now(), notAcquired(lastErr)
		case <-notices:
			t.Stop()
		case <-turn.wake:
			t.Stop()
			if g, sent, ok := handed(); ok {
				return g, sent, nil
			}
		case <-t.C:
		}
	}
}

// waitNatively waits in the backend's own queue. A store failure (a
// session the store or the network ended) is retried with a fresh token
// while the wait lasts, as the client's own line retries one: the wait ends
// with a grant, with ErrNotAcquired joined with the last failure, or with a
// failure that retrying cannot mend.
func (c *Client) waitNatively(wctx context.Context, r *Request, req *driver.AcquireRequest, w driver.Waiter, notAcquired func(error) error) (driver.Grant, time.Time, error) {
	bo := backoff{min: 5 * time.Millisecond, max: 200 * time.Millisecond}
	var lastErr error
	for {
		sent := time.Now()
		g, err := w.AcquireWait(wctx, *req)
		failpoint("acquire-sent", r.Key)
		switch {
		case err == nil:
			if !g.Sent.IsZero() {
				sent = g.Sent
			}
			return g, sent, nil
		case errors.Is(err, ErrNotAcquired):
			return driver.Grant{}, sent, notAcquired(lastErr)
		case r.keepToken:
			return driver.Grant{}, sent, err // the caller decides about its token
		}
		c.releaseAbandoned(r, req.Token)
		switch {
		case errors.Is(context.Cause(wctx), ErrClosed):
			return driver.Grant{}, sent, notAcquired(nil)
		case driver.Ended(wctx):
			// The backend's wait ended with a failure it met while the
			// wait lasted (Waiter's contract: the wait's own end is
			// ErrNotAcquired).
			if lastErr == nil {
				lastErr = err
			}
			return driver.Grant{}, sent, notAcquired(lastErr)
		case permanent(err):
			return driver.Grant{}, sent, err
		}
		req.Token, lastErr = newToken(), err
		t := time.NewTimer(bo.next())
		select {
		case <-wctx.Done():
			t.Stop()
			return driver.Grant{}, time.Now(), notAcquired(lastErr)
		case <-t.C:
		}
	}
}

// cutByWaitEnd reports whether err, an attempt's failure, is the wait's own
// end: wctx has ended and the attempt failed with its context's error. It
// says nothing of the store, which may well have been answering: a wait
// that ends so is ErrNotAcquired alone, not a store failure (a caller such
// as distlock run tells the two apart by the errors joined to it).
func cutByWaitEnd(wctx context.Context, err error) bool {
	return driver.Ended(wctx) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))
}

// untilClosed returns ctx, also cancelled, with the cause ErrClosed, when
// the client closes; stop releases what it registered.
func (c *Client) untilClosed(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stopAfter := context.AfterFunc(c.closeCtx, func() { cancel(ErrClosed) })
	return ctx, func() {
		stopAfter()
		cancel(nil)
	}
}

// releaseOrHand frees key for token: it hands the key to this client's next
// waiter if the backend can, else releases it by token and wakes that
// waiter.
func (c *Client) releaseOrHand(ctx context.Context, r *Request, token string) error {
	var failed error // a handoff whose outcome is unknown
	if hb, ok := c.backend.(driver.Handoff); ok {
		if t := c.lines.next(r.Key); t != nil && !t.keepsToken {
			done, err := c.handOff(ctx, hb, r, token, t)
			if done {
				if err != nil {
					c.lines.released(r.Key) // the lease had run out: the key may be free
				}
				return err
			}
			failed = err
		}
	}
	err := c.releaseByToken(ctx, r, token, failed)
	if err == nil || errors.Is(err, ErrNotHeld) {
		c.lines.released(r.Key)
	}
	return err
}

// maxHandoffs is how many times in a row a client hands a key to its own
// next waiter before it releases it for real, so that other clients'
// waiters, which only a free key lets in, get their turn.
const maxHandoffs = 16

// handOff passes r.Key from token straight to t's waiter, with a fresh
// token, and reports whether the store no longer holds token: true with a
// nil error when handed over, true with ErrNotHeld when the lease had run
// out, false when the outcome is unknown and token must still be released.
func (c *Client) handOff(ctx context.Context, hb driver.Handoff, r *Request, token string, t *turn) (bool, error) {
	next := t.req
	next.Token = newToken()
	sent := time.Now()
	g, err := hb.Handoff(ctx, r.Key, token, next)
	c.observeCall(ctx, r, "handoff", sent, err)
	switch {
	case err == nil:
		if !g.Sent.IsZero() {
			sent = g.Sent
		}
		if !c.lines.hand(r.Key, t, handed{grant: g, token: next.Token, sent: sent}) {
			c.releaseAbandoned(r, next.Token) // the waiter left meanwhile
		}
		return true, nil
	case errors.Is(err, ErrNotHeld):
		return true, err
	default:
		c.releaseAbandoned(r, next.Token) // it may have been handed over
		return false, err
	}
}

// lines holds, per key, this client's waiters in arrival order, so that a
// goroutine coming back for a key cannot barge ahead of those already
// waiting, and only the one at the head loads the store. A release by this
// client wakes the head at once, without waiting for the store's notice, or
// hands the key straight to it (Handoff). Fairness across clients is the
// store's to give (etcd and ZooKeeper queue natively).
type lines struct {
	waiting atomic.Int64 // waiters in all lines, read without the lock
	mu      sync.Mutex
	byKey   map[string]*line
}

// line is one key's waiters.
type line struct {
	turns    []*turn
	handoffs int // handoffs since the key was last released for real
}

// turn is one waiter's place in a line.
type turn struct {
	req    driver.AcquireRequest // what the waiter asks for; the token is chosen when handing over
	head   chan struct{}         // closed when the waiter reaches the head
	wake   chan struct{}         // a local release of the key; buffered
	handed chan handed           // a grant handed over by a local release; buffered
	// behindGrant is set, before head closes, when the waiter ahead left
	// holding the key.
	behindGrant bool
	// keepsToken: the waiter's token is its caller's (AcquireToken), so no
	// grant can be handed to it under a fresh one; a release wakes it instead.
	keepsToken bool
}

// handed is a grant passed to a waiter by a local release.
type handed struct {
	grant driver.Grant
	token string
	sent  time.Time
}

// takeHanded returns the grant handed to t, if any.
func (t *turn) takeHanded() (handed, bool) {
	select {
	case h := <-t.handed:
		return h, true
	default:
		return handed{}, false
	}
}

// empty reports whether no waiter of this client is in key's line.
func (l *lines) empty(key string) bool {
	if l.waiting.Load() == 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byKey[key] == nil
}

// join queues a waiter for req.Key.
func (l *lines) join(req driver.AcquireRequest, keepsToken bool) *turn {
	req.Token = ""
	t := &turn{req: req, head: make(chan struct{}), wake: make(chan struct{}, 1), handed: make(chan handed, 1), keepsToken: keepsToken}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey = make(map[string]*line)
	}
	ln := l.byKey[req.Key]
	if ln == nil {
		ln = &line{}
		l.byKey[req.Key] = ln
	}
	l.waiting.Add(1)
	ln.turns = append(ln.turns, t)
	if len(ln.turns) == 1 {
		close(t.head)
	}
	return t
}

// leave removes t from key's line and promotes the next waiter if t was at
// the head; granted tells whether t leaves holding the key.
func (l *lines) leave(key string, t *turn, granted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.byKey[key]
	if ln == nil {
		return
	}
	for i, w := range ln.turns {
		if w != t {
			continue
		}
		l.waiting.Add(-1)
		ln.turns = append(ln.turns[:i], ln.turns[i+1:]...)
		if i == 0 && len(ln.turns) > 0 {
			ln.turns[0].behindGrant = granted
			close(ln.turns[0].head)
		}
		break
	}
	if len(ln.turns) == 0 {
		delete(l.byKey, key)
	}
}

// next returns the waiter at the head of key's line if the key may be handed
// to it, or nil: nobody waits, or the line had its run of handoffs and the
// key must be released for real.
func (l *lines) next(key string) *turn {
	if l.waiting.Load() == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.byKey[key]
	if ln == nil || len(ln.turns) == 0 || ln.handoffs >= maxHandoffs {
		return nil
	}
	ln.handoffs++
	return ln.turns[0]
}

// hand gives h to t and wakes it, if t is still in key's line.
func (l *lines) hand(key string, t *turn, h handed) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	ln := l.byKey[key]
	if ln == nil || !slices.Contains(ln.turns, t) {
		return false
	}
	select {
	case t.handed <- h:
	default:
		return false
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
	return true
}

// released wakes the waiter at the head of key's line, if any, after a
// release by this client.
func (l *lines) released(key string) {
	if l.waiting.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ln := l.byKey[key]; ln != nil && len(ln.turns) > 0 {
		ln.handoffs = 0
		select {
		case ln.turns[0].wake <- struct{}{}:
		default:
		}
	}
}
