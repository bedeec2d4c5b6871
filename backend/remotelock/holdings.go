package remotelock

import (
	"context"
	"time"

	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// keep records a grant of req, made by a request sent at sent, and returns
// it with its Fence, Lost and Requested set.
func (b *Backend) keep(k calls, req driver.AcquireRequest, resp *distlockv1.AcquireResponse, sent time.Time) driver.Grant {
	lost, cancel := context.WithCancel(context.Background())
	requested, ask := context.WithCancelCause(context.Background())
	h := &holding{server: resp.GetToken(), calls: k, fence: resp.GetFence(), until: sent.Add(req.TTL + sweepGrace), lost: cancel, ask: ask}
	id := k.id(req)
	b.mu.Lock()
	if old := b.held[id]; old != nil && b.watch != nil {
		b.watch.forget(id.key, old.fence)
	}
	b.held[id] = h
	b.sweepLocked()
	b.mu.Unlock()
	g := driver.Grant{Fence: h.fence, Lost: lost}
	if _, lock := k.(lockCalls); lock { // requests to release are of locks only
		g.Requested = requested
		if b.watch != nil { // the Watch stream tells of locks only
			b.watch.follow(req.Key, h.fence, id)
		}
	}
	return g
}

// asked ends the Requested context of the hold id with reason: somebody
// asked its holder to release it.
func (b *Backend) asked(id lockID, reason string) {
	b.mu.Lock()
	h := b.held[id]
	b.mu.Unlock()
	if h != nil && h.ask != nil {
		h.ask(&driver.ReleaseRequest{Reason: reason})
	}
}

// keepUnknown records an acquisition of req (of kind k) whose reply never
// came, so that a Release of its token frees what it may have taken.
func (b *Backend) keepUnknown(k calls, req driver.AcquireRequest, sent time.Time) {
	id := k.id(req)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[id] != nil { // a grant of the same token is known: keep it
		return
	}
	b.held[id] = &holding{req: req, calls: k, until: sent.Add(req.TTL + sweepGrace)}
	b.sweepLocked()
}

// firstTry reports whether no call of this backend for the hold id can
// have been granted: it knows of no grant of it, and of no call for it
// whose reply never came. The service then need not look for the grant
// (first_try).
func (b *Backend) firstTry(id lockID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held[id] == nil
}

// serverToken returns the service's token for the hold id.
func (b *Backend) serverToken(id lockID) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.held[id]
	if h == nil || h.server == "" {
		return "", false
	}
	return h.server, true
}

// confirmed notes that the service kept the hold id for ttl from sent.
func (b *Backend) confirmed(id lockID, sent time.Time, ttl time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.held[id]; h != nil {
		h.until = sent.Add(ttl + sweepGrace)
	}
}

// verify asks the service whether the grant id, of key with fence, is
// still held, unless this backend is releasing it, and drops it as lost if
// not. A failed call leaves it to the grant's next renewal.
func (b *Backend) verify(key string, fence uint64, id lockID) {
	b.mu.Lock()
	h := b.held[id]
	mine := h == nil || h.releasing
	b.mu.Unlock()
	if mine {
		return
	}
	info, err := b.Inspect(b.closing, key)
	if err == nil && (!info.Held || info.Fence != fence) {
		b.drop(id, true)
	}
}

// drop forgets an acquisition; lost says the service no longer knows it,
// which ends its grant's Lost context.
func (b *Backend) drop(id lockID, lost bool) {
	b.mu.Lock()
	h := b.held[id]
	delete(b.held, id)
	b.mu.Unlock()
	if h == nil {
		return
	}
	if b.watch != nil && h.server != "" {
		b.watch.forget(id.key, h.fence)
	}
	if lost && h.lost != nil {
		h.lost()
	}
}

// sweepLocked drops, once the map has grown by half since the last sweep,
// the entries whose lease ended long ago: locks lost or abandoned without
// a Release. b.mu is held.
func (b *Backend) sweepLocked() {
	if len(b.held) < b.nextSweep {
		return
	}
	now := time.Now()
	for id, h := range b.held {
		if now.After(h.until) {
			delete(b.held, id)
			if b.watch != nil && h.server != "" {
				b.watch.forget(id.key, h.fence)
			}
		}
	}
	b.nextSweep = max(1024, len(b.held)+len(b.held)/2)
}
