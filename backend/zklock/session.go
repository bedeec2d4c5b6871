package zklock

import (
	"context"
	"errors"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// hold is a lock this backend holds.
type hold struct {
	token   string
	path    string
	meta    driver.Meta
	permits int                // a semaphore's hold of several permits counts them; else 0
	fence   uint64             // the node's czxid
	ttl     time.Duration      // as last written; guarded by Backend.mu
	data    []byte             // the node's value for ttl; guarded by Backend.mu
	lost    context.Context    // done when the hold is lost
	lose    context.CancelFunc // ends lost
	ended   chan struct{}      // closed by release or Close: stop watching
	touch   bool               // granted after a wait: rewrite the node once (watchHold)

	// shared marks a read-write lock writer's hold that was downgraded:
	// data says so. Guarded by Backend.mu.
	shared bool
	// version is the node's data version as of this backend's last write
	// of it (renewIn, DowngradeRW), 0 (a new node's) before any, or -1 if
	// unknown. Guarded by Backend.mu.
	version int32

	// orphaned marks a hold reported lost while disconnected: its node may
	// outlive the outage with the session, and must then be deleted.
	orphaned bool // guarded by Backend.mu
}

func newHold(req driver.AcquireRequest, path string, data []byte) *hold {
	h := &hold{token: req.Token, path: path, meta: req.Meta, ttl: req.TTL, data: data, ended: make(chan struct{})}
	if req.Permits > 1 {
		h.permits = req.Permits
	}
	h.lost, h.lose = context.WithCancel(context.Background())
	return h
}

// setLocked sets the hold's ttl and mode, and its node's value for them.
// Backend.mu must be held.
func (h *hold) setLocked(ttl time.Duration, shared bool) {
	if h.ttl != ttl || h.shared != shared {
		h.ttl, h.shared = ttl, shared
		h.data = value{Token: h.token, TTLMs: ttl.Milliseconds(), Meta: h.meta, Shared: shared, Permits: h.permits}.encode()
	}
}

// end stops watching the hold; it does not report it lost.
func (h *hold) end() {
	select {
	case <-h.ended:
	default:
		close(h.ended)
	}
}

// markLost ends Lost, unless the hold ended first. Called with b.mu.
func (h *hold) markLost() {
	select {
	case <-h.ended:
	default:
		h.lose()
	}
}

// watchSession follows the session's state until the connection closes or
// the backend does. A connection closed for good ends every hold.
func (b *Backend) watchSession(events <-chan zk.Event) {
	var grace <-chan time.Time
	var timer *time.Timer
	stopGrace := func() {
		if timer != nil {
			timer.Stop()
		}
		timer, grace = nil, nil
	}
	defer stopGrace()
	for {
		select {
		case <-b.life.Done():
			return
		case ev, ok := <-events:
			if !ok {
				close(b.connGone)
				b.loseAll(false)
				return
			}
			if ev.Type != zk.EventSession {
				continue
			}
			switch ev.State {
			case zk.StateDisconnected:
				if timer == nil {
					timer = time.NewTimer(b.sessionTimeout / 6)
					grace = timer.C
				}
			case zk.StateHasSession:
				stopGrace()
				b.deleteOrphans()
			case zk.StateExpired:
				stopGrace()
				b.loseAll(false)
			}
		case <-grace:
			timer, grace = nil, nil
			b.loseAll(true)
		}
	}
}

// loseAll reports every held lock lost. With orphan, their nodes may still
// exist and are deleted once the session is back; without, they are gone
// and so are their records (the client sends no release for them).
func (b *Backend) loseAll(orphan bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for token, h := range b.holds {
		h.markLost()
		if orphan {
			h.orphaned = true
			continue
		}
		delete(b.holds, token)
		h.end()
	}
}

// lose reports one hold lost, its node being gone, and drops its record.
func (b *Backend) lose(h *hold) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h.markLost()
	if b.holds[h.token] == h {
		delete(b.holds, h.token)
	}
}

// deleteOrphans deletes the nodes of holds reported lost during an outage
// that the session survived.
func (b *Backend) deleteOrphans() {
	b.mu.Lock()
	var paths []string
	for token, h := range b.holds {
		if h.orphaned {
			paths = append(paths, h.path)
			delete(b.holds, token)
			h.end()
		}
	}
	b.mu.Unlock()
	for _, p := range paths {
		b.background(func(ctx context.Context) { _ = b.deleteNode(ctx, p, -1) })
	}
}

// lossWatchDelay is how long a hold lasts before its node is watched. The
// watch starts with a look at the node, so a deletion meanwhile is still
// reported, at most this late; short holds never pay for a watch.
const lossWatchDelay = 100 * time.Millisecond

// watchHold reports the hold lost when its node is deleted (released
// elsewhere, expired by a waiter, an operator). Its own renewals fire the
// watch, which is set again. A watch that ends with the session is left to
// watchSession.
//
// A hold granted after a wait first touches its node (rewrites its value),
// after lossWatchDelay or a quarter of its lease if that is shorter. A
// waiter that began timing the lease as soon as the node was first, which
// can be a moment before the holder learnt of its grant and started its own
// clock, times it again from the touch; one further back that watched the
// node as a waiter learns from the touch that it is next. Holds shorter
// than that never pay for the write, and a waiter further back learns of
// a hung holder from its own look once per lease (see awaitPred).
func (b *Backend) watchHold(h *hold) {
	wait := lossWatchDelay
	if h.touch {
		b.mu.Lock()
		wait = min(wait, h.ttl/4)
		b.mu.Unlock()
	}
	delay := time.NewTimer(wait)
	defer delay.Stop()
	select {
	case <-h.ended:
		return
	case <-delay.C:
	}
	if h.touch {
		b.mu.Lock()
		data := h.data
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), b.requestTimeout)
		_, err := call(ctx, b, func() (*zk.Stat, error) { return b.conn.Set(h.path, data, -1) }, nil)
		cancel()
		if errors.Is(err, zk.ErrNoNode) {
			b.lose(h)
			return
		}
	}
	for {
		exists, _, ch, err := b.conn.ExistsW(h.path)
		switch {
		case err != nil:
			return
		case !exists:
			b.lose(h)
			return
		}
		select {
		case <-h.ended:
			return
		case ev := <-ch:
			if ev.Type != zk.EventNodeDataChanged && ev.Type != zk.EventNodeDeleted {
				return
			}
		}
	}
}

// background runs f with a fresh bounded context in a goroutine Close waits
// for. Once Close has begun it runs f at once instead, in the caller's
// goroutine: Close may already be waiting, and a goroutine started then
// would be neither waited for nor safe to count.
func (b *Backend) background(f func(ctx context.Context)) {
	run := func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.requestTimeout)
		defer cancel()
		f(ctx)
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		run()
		return
	}
	b.bg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.bg.Done()
		run()
	}()
}
