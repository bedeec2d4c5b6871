package sqllock

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// lostChannel is the PostgreSQL channel a forced release notifies, with
// "<token>\n<key>" of the hold it removed as payload. Tokens hold no
// newline.
const lostChannel = "distlock_lost"

// holders are the holds of this backend whose loss someone follows
// (PostgreSQL only), by key and token, each with the context that its
// driver.Grant.Lost is. The listening session hands them the forced
// releases' notices, and the holder learns at once rather than at its next
// renewal. An entry ends with the hold's release, a refused renewal, or,
// for a hold whose client stopped renewing and never released, a minute
// after its lease ran out.
type holders struct {
	mu    sync.Mutex
	held  map[holdID]*heldLock
	swept time.Time
}

// holdID names a hold: one token may hold several keys.
type holdID struct{ key, token string }

// heldLock is a hold as holders keep it.
type heldLock struct {
	lost   context.Context
	cancel context.CancelCauseFunc // ends lost with a *driver.Loss
	until  time.Time               // when its lease runs out unless renewed
}

// staleAfter is how long after its lease ran out an entry is dropped.
const staleAfter = time.Minute

// hold records a grant of key to token for ttl and returns its Lost
// context. A repeated grant to the same token (a retry whose reply was
// lost) shares the first one's.
func (h *holders) hold(key, token string, ttl time.Duration) context.Context {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held == nil {
		h.held = make(map[holdID]*heldLock)
	}
	if now.Sub(h.swept) > staleAfter {
		h.swept = now
		for id, l := range h.held {
			if now.Sub(l.until) > staleAfter {
				delete(h.held, id)
			}
		}
	}
	id := holdID{key, token}
	if l, ok := h.held[id]; ok {
		l.until = now.Add(ttl)
		return l.lost
	}
	l := &heldLock{until: now.Add(ttl)}
	l.lost, l.cancel = context.WithCancelCause(context.Background())
	h.held[id] = l
	return l.lost
}

// renewed records that key's hold by token now runs for ttl.
func (h *holders) renewed(key, token string, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l, ok := h.held[holdID{key, token}]; ok {
		l.until = time.Now().Add(ttl)
	}
}

// forget drops key's hold by token: it ended, and its holder knows.
func (h *holders) forget(key, token string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.held, holdID{key, token})
}

// following reports whether a hold is followed.
func (h *holders) following() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.held) > 0
}

// removed takes a notice of lostChannel and ends the Lost context of the
// hold it names: the forced release left the key free.
func (h *holders) removed(payload string) {
	token, key, ok := strings.Cut(payload, "\n")
	if !ok {
		return
	}
	id := holdID{key, token}
	h.mu.Lock()
	l, held := h.held[id]
	delete(h.held, id)
	h.mu.Unlock()
	if held {
		l.cancel(&driver.Loss{Reason: driver.LossDeleted})
	}
}
