package redislock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// lostChannel is the channel, after the notice channels' prefix, on which
// a forced release names the token it removed (forcerelease.lua), and a
// request to release names the holder's token and the reason (request.lua).
// No backend id is "lost": ids are hex.
const lostChannel = "lost"

// holders are the locks this backend holds, by token, each with the
// context that its driver.Grant.Lost is. A forced release by any client
// publishes the token it removed on the lost channel; the inbox's
// subscription, which every grant and waiter of the backend shares, hands
// it here, and the holder learns at once rather than at its next renewal.
// The tracker (track.go) judges here what it read of a held key. An entry
// ends with the hold's release, a refused renewal, or, for a hold whose
// client stopped renewing and never released, a minute after its lease ran
// out.
type holders struct {
	mu      sync.Mutex
	byToken map[string]*heldLock
	byKey   map[string]map[string]*heldLock // the same entries, by key and token
	gen     uint64                          // holds recorded so far
	swept   time.Time
}

// heldLock is a held lock as holders keep it.
type heldLock struct {
	lost      context.Context
	cancel    context.CancelCauseFunc // ends lost, with a *driver.Loss or nil
	requested context.Context         // its driver.Grant.Requested
	ask       context.CancelCauseFunc // ends requested
	key       string
	until     time.Time // when its lease runs out unless renewed
	since     uint64    // holders.gen when it was recorded
}

// staleAfter is how long after its lease ran out an entry is dropped.
const staleAfter = time.Minute

// hold records a grant to token for ttl and returns it, whose Lost and
// Requested contexts the grant takes. A repeated grant to the same token (a
// retry whose reply was lost) shares the first one's.
func (h *holders) hold(key, token string, ttl time.Duration) *heldLock {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byToken == nil {
		h.byToken = make(map[string]*heldLock)
		h.byKey = make(map[string]map[string]*heldLock)
	}
	if now.Sub(h.swept) > staleAfter {
		h.swept = now
		for t, l := range h.byToken {
			if now.Sub(l.until) > staleAfter {
				h.dropLocked(t, l)
			}
		}
	}
	if l, ok := h.byToken[token]; ok {
		l.until = now.Add(ttl)
		return l
	}
	h.gen++
	l := &heldLock{key: key, until: now.Add(ttl), since: h.gen}
	l.lost, l.cancel = context.WithCancelCause(context.Background())
	l.requested, l.ask = context.WithCancelCause(context.Background())
	h.byToken[token] = l
	if h.byKey[key] == nil {
		h.byKey[key] = make(map[string]*heldLock, 1)
	}
	h.byKey[key][token] = l
	return l
}

// dropLocked removes token's entry l. h.mu is held.
func (h *holders) dropLocked(token string, l *heldLock) {
	delete(h.byToken, token)
	if tokens := h.byKey[l.key]; tokens != nil {
		delete(tokens, token)
		if len(tokens) == 0 {
			delete(h.byKey, l.key)
		}
	}
}

// recorded returns the number of holds recorded so far: a read of the
// store sent after it can judge those holds, not later ones.
func (h *holders) recorded() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gen
}

// holds reports whether the backend holds key.
func (h *holders) holds(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byKey[key]) > 0
}

// judge takes the value of key that a read sent once recorded holds were
// recorded found (exists false: no key), and ends the Lost context of
// every one of those holds of key whose token it no longer is: deleted if
// the key is gone, taken if another token holds it. A token followed by
// "\n" (waiters queued) is still its token.
func (h *holders) judge(key, value string, exists bool, recorded uint64) {
	h.mu.Lock()
	var gone []*heldLock
	for token, l := range h.byKey[key] {
		if l.since > recorded || (exists && (value == token || value == token+"\n")) {
			continue
		}
		h.dropLocked(token, l)
		gone = append(gone, l)
	}
	h.mu.Unlock()
	reason := driver.LossDeleted
	if exists {
		reason = driver.LossTaken
	}
	for _, l := range gone {
		l.cancel(&driver.Loss{Reason: reason})
	}
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
	if l, ok := h.byToken[token]; ok {
		h.dropLocked(token, l)
	}
}

// notice takes a message of the lost channel: "<token>\n<reason>", a
// token that a forced release removed and what became of the key, or the
// bare token, which the same forced release sends next for backends of
// earlier releases (forcerelease.lua); or "<token> <reason>", a request to
// release (request.lua), whose reason may hold a newline. Tokens hold
// neither.
func (h *holders) notice(payload string) {
	i := strings.IndexAny(payload, " \n")
	switch {
	case i < 0:
		h.removed(payload, nil)
	case payload[i] == '\n':
		h.removed(payload[:i], &driver.Loss{Reason: payload[i+1:]})
	default:
		h.asked(payload[:i], payload[i+1:])
	}
}

// asked ends the Requested context of token's hold with reason.
func (h *holders) asked(token, reason string) {
	h.mu.Lock()
	l, ok := h.byToken[token]
	h.mu.Unlock()
	if ok {
		l.ask(&driver.ReleaseRequest{Reason: reason})
	}
}

// removed ends the Lost context of token's hold, which a forced release
// removed, with cause (nil if the notice did not say).
func (h *holders) removed(token string, cause error) {
	h.mu.Lock()
	l, ok := h.byToken[token]
	if ok {
		h.dropLocked(token, l)
	}
	h.mu.Unlock()
	if ok {
		l.cancel(cause)
	}
}

// granted records a grant that err did not refuse and sets its Lost
// context, then makes sure the backend listens for lost notices, and has
// the tracker follow the hold unless nobody follows it (req.Unfollowed).
func (b *Backend) granted(g driver.Grant, err error, req driver.AcquireRequest) (driver.Grant, error) {
	if err != nil {
		return g, err
	}
	l := b.holders.hold(req.Key, req.Token, req.TTL)
	g.Lost, g.Requested = l.lost, l.requested
	b.listenForLoss()
	if b.tracker != nil && !req.Unfollowed {
		b.tracker.follow(req.Key)
	}
	return g, nil
}

// unasked returns the holds that no request has reached yet.
func (h *holders) unasked() map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	keys := make(map[string]string)
	for token, l := range h.byToken {
		if l.requested.Err() == nil {
			keys[token] = l.key
		}
	}
	return keys
}

// readMissedRequests tells the holders of requests made while the inbox
// was not listening: request.lua records each request under the key's
// request name, as "<token> <reason>", for as long as the lock lives. It
// runs once the lost channel's subscription is confirmed, in the
// background, one read per lock held.
func (b *Backend) readMissedRequests() {
	if !b.enterWait() {
		return
	}
	go func() {
		defer b.waits.Done()
		for token, key := range b.holders.unasked() {
			r, err := b.evalStrings(b.closing, scriptRequested, []string{b.requestName(key)})
			if err != nil {
				return // the next subscription tries again
			}
			if len(r) == 1 {
				if t, reason, ok := strings.Cut(r[0], " "); ok && t == token {
					b.holders.asked(token, reason)
				}
			}
		}
	}()
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
