package redislock

import (
	"context"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// lostChannel is the channel, after the notice channels' prefix, on which
// a forced release names the token it removed (forcerelease.lua). No
// backend id is "lost": ids are hex.
const lostChannel = "lost"

// holders are the locks this backend holds, by token, each with the
// context that its driver.Grant.Lost is. A forced release by any client
// publishes the token it removed on the lost channel; the inbox's
// subscription, which every grant and waiter of the backend shares, hands
// it here, and the holder learns at once rather than at its next renewal.
// An entry ends with the hold's release, a refused renewal, or, for a hold
// whose client stopped renewing and never released, a minute after its
// lease ran out.
type holders struct {
	mu      sync.Mutex
	byToken map[string]*heldLock
	swept   time.Time
}

// heldLock is a held lock as holders keep it.
type heldLock struct {
	lost   context.Context
	cancel context.CancelFunc
	until  time.Time // when its lease runs out unless renewed
}

// staleAfter is how long after its lease ran out an entry is dropped.
const staleAfter = time.Minute

// hold records a grant to token for ttl and returns its Lost context. A
// repeated grant to the same token (a retry whose reply was lost) shares
// the first one's.
func (h *holders) hold(token string, ttl time.Duration) context.Context {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byToken == nil {
		h.byToken = make(map[string]*heldLock)
	}
	if now.Sub(h.swept) > staleAfter {
		h.swept = now
		for t, l := range h.byToken {
			if now.Sub(l.until) > staleAfter {
				delete(h.byToken, t)
			}
		}
	}
	if l, ok := h.byToken[token]; ok {
		l.until = now.Add(ttl)
		return l.lost
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.byToken[token] = &heldLock{lost: ctx, cancel: cancel, until: now.Add(ttl)}
	return ctx
}

// renewed records that token's lease now runs for ttl.
func (h *holders) renewed(token string, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.byToken[token]; ok {
		l.until = time.Now().Add(ttl)
	}
}

// forget drops token's entry: its hold ended, and its holder knows.
func (h *holders) forget(token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.byToken, token)
}

// removed ends the Lost context of token's hold, which a forced release
// removed.
func (h *holders) removed(token string) {
	h.mu.Lock()
	l, ok := h.byToken[token]
	delete(h.byToken, token)
	h.mu.Unlock()
	if ok {
		l.cancel()
	}
}

// granted records a grant that err did not refuse and sets its Lost
// context, then makes sure the backend listens for lost notices.
func (b *Backend) granted(g driver.Grant, err error, token string, ttl time.Duration) (driver.Grant, error) {
	if err != nil {
		return g, err
	}
	g.Lost = b.holders.hold(token, ttl)
	b.listenForLoss()
	return g, nil
}

// listenForLoss subscribes the inbox, in the background, unless it is
// subscribed or a subscription is under way: a holder that never waits
// still hears lost notices. Its failure is retried at the next grant or
// renewal.
func (b *Backend) listenForLoss() {
	if b.inbox.listening() || !b.enterWait() {
		return
	}
	go func() {
		defer b.waits.Done()
		b.inbox.listen(b.closing)
	}()
}
