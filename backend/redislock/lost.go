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

// holders are the locks this backend holds, by key and token (a token may
// hold several keys), each with the context that its driver.Grant.Lost
// is. A forced release by any client publishes the token and key it
// removed on the lost channel; the inbox's subscription, which every grant
// and waiter of the backend shares, hands it here, and the holder learns at
// once rather than at its next renewal. The tracker (track.go) judges here
// what it read of a held key. An entry ends with the hold's release, a
// refused renewal, or, for a hold whose client stopped renewing and never
// released, a minute after its lease ran out.
type holders struct {
	mu      sync.Mutex
	byKey   map[string]map[string]*heldLock // by key, then token
	byToken map[string]map[string]*heldLock // the same entries, by token, then key
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
	token     string
	until     time.Time // when its lease runs out unless renewed
	since     uint64    // holders.gen when it was recorded
}

// staleAfter is how long after its lease ran out an entry is dropped.
const staleAfter = time.Minute

// hold records a grant of key to token for ttl and returns it, whose Lost
// and Requested contexts the grant takes. A repeated grant of key to the
// same token (a retry whose reply was lost) shares the first one's.
func (h *holders) hold(key, token string, ttl time.Duration) *heldLock {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byKey == nil {
		h.byKey = make(map[string]map[string]*heldLock)
		h.byToken = make(map[string]map[string]*heldLock)
	}
	if now.Sub(h.swept) > staleAfter {
		h.swept = now
		for _, tokens := range h.byKey {
			for _, l := range tokens {
				if now.Sub(l.until) > staleAfter {
					h.dropLocked(l)
				}
			}
		}
	}
	if l, ok := h.byKey[key][token]; ok {
		l.until = now.Add(ttl)
		return l
	}
	h.gen++
	l := &heldLock{key: key, token: token, until: now.Add(ttl), since: h.gen}
	l.lost, l.cancel = context.WithCancelCause(context.Background())
	l.requested, l.ask = context.WithCancelCause(context.Background())
	index(h.byKey, key, token, l)
	index(h.byToken, token, key, l)
	return l
}

// index records l in m under a and b.
func index(m map[string]map[string]*heldLock, a, b string, l *heldLock) {
	if m[a] == nil {
		m[a] = make(map[string]*heldLock, 1)
	}
	m[a][b] = l
}

// unindex removes the entry of m under a and b.
func unindex(m map[string]map[string]*heldLock, a, b string) {
	if inner := m[a]; inner != nil {
		delete(inner, b)
		if len(inner) == 0 {
			delete(m, a)
		}
	}
}

// dropLocked removes the entry l. h.mu is held.
func (h *holders) dropLocked(l *heldLock) {
	unindex(h.byKey, l.key, l.token)
	unindex(h.byToken, l.token, l.key)
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
		h.dropLocked(l)
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

// renewed records that key's hold by token now runs for ttl.
func (h *holders) renewed(key, token string, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.byKey[key][token]; ok {
		l.until = time.Now().Add(ttl)
	}
}

// forget drops key's hold by token: it ended, and its holder knows.
func (h *holders) forget(key, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.byKey[key][token]; ok {
		h.dropLocked(l)
	}
}

// notice takes a message of the lost channel: "<token>\n<reason>\n<key>",
// the hold that a forced release removed and what became of the key
// (forcerelease.lua); "<token> <reason>", a request to release (request.lua),
// whose reason may hold a newline; or a bare token, which the forced
// releases of earlier releases sent. Tokens hold neither a space nor a
// newline.
func (h *holders) notice(payload string) {
	i := strings.IndexAny(payload, " \n")
	switch {
	case i < 0:
		h.removedToken(payload)
	case payload[i] == '\n':
		reason, key, ok := strings.Cut(payload[i+1:], "\n")
		if ok {
			h.removed(key, payload[:i], &driver.Loss{Reason: reason})
		}
	default:
		h.asked(payload[:i], payload[i+1:])
	}
}

// asked ends the Requested context of token's holds with reason.
func (h *holders) asked(token, reason string) {
	h.mu.Lock()
	var asked []*heldLock
	for _, l := range h.byToken[token] {
		asked = append(asked, l)
	}
	h.mu.Unlock()
	for _, l := range asked {
		l.ask(&driver.ReleaseRequest{Reason: reason})
	}
}

// removed ends the Lost context of key's hold by token, which a forced
// release removed, with cause.
func (h *holders) removed(key, token string, cause error) {
	h.mu.Lock()
	l, ok := h.byKey[key][token]
	if ok {
		h.dropLocked(l)
	}
	h.mu.Unlock()
	if ok {
		l.cancel(cause)
	}
}

// removedToken takes a forced release's notice that names only the token:
// it ends that token's hold if the token holds one key here, and leaves a
// token holding several to learn at its next renewal.
func (h *holders) removedToken(token string) {
	h.mu.Lock()
	var gone *heldLock
	if keys := h.byToken[token]; len(keys) == 1 {
		for _, l := range keys {
			gone = l
		}
		h.dropLocked(gone)
	}
	h.mu.Unlock()
	if gone != nil {
		gone.cancel(nil)
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
func (h *holders) unasked() []*heldLock {
	h.mu.Lock()
	defer h.mu.Unlock()
	var holds []*heldLock
	for _, tokens := range h.byKey {
		for _, l := range tokens {
			if l.requested.Err() == nil {
				holds = append(holds, l)
			}
		}
	}
	return holds
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
		for _, l := range b.holders.unasked() {
			r, err := b.evalStrings(b.closing, scriptRequested, []string{b.requestName(l.key)})
			if err != nil {
				return // the next subscription tries again
			}
			if len(r) == 1 {
				if t, reason, ok := strings.Cut(r[0], " "); ok && t == l.token {
					l.ask(&driver.ReleaseRequest{Reason: reason})
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
