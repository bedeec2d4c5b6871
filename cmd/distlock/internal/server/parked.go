package server

import (
	"context"
	"sync"
	"time"

	"github.com/distlock/distlock"
)

// parkTime is how long a resumable wait keeps its place in the key's queue
// after its call ended without a grant, for the caller's next call.
const parkTime = 2 * time.Second

// parking keeps the waits of the Acquire calls that will be resumed
// (AcquireRequest.resumes): a long wait is made of several calls, and
// without parking each call's end took the waiter out of the key's queue,
// so that its next call queued at the tail. A parked wait runs in the store
// apart from its calls. A call that ends without a grant leaves it; the
// next call with the same request id (so the same token) joins it, and
// gets the grant it made meanwhile, if any. parkTime after the last call
// left with none back, the wait ends, and a grant nobody took is released.
type parking struct {
	mu    sync.Mutex
	waits map[string]*parkedWait // by token
}

// parkedWait is one wait in the store, for one token.
type parkedWait struct {
	sk     string
	cancel context.CancelFunc // ends the wait in the store
	done   chan struct{}      // closed once the wait ended, with g, labels and err set

	g      distlock.TokenGrant
	labels map[string]string
	err    error

	// Under parking.mu.
	calls    int         // calls waiting on it
	unwanted bool        // a call gave it up while others waited on it
	idle     *time.Timer // ends it parkTime after the last call left
	finished bool        // done is closed
	ended    bool        // out of the map: no call joins it any more
	taken    bool        // a call answered its outcome: a grant is the caller's
}

// join returns the wait parked for token on sk, counting one more call on
// it, or nil if there is none.
func (p *parking) join(token, sk string) *parkedWait {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.waits[token]
	if w == nil || w.sk != sk {
		return nil
	}
	w.calls++
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	return w
}

// park starts a wait in the store for token on sk, with the call that asks
// for it counted on it: wait runs it until the context it is given ends
// (when the wait is given up or the server stops). release frees a grant
// that nobody took; done is called once the store's wait returned. If
// another call parked a wait for token first, park joins that one.
func (p *parking) park(stop context.Context, token, sk string, wait func(context.Context) (distlock.TokenGrant, map[string]string, error), release func(*parkedWait), done func()) *parkedWait {
	p.mu.Lock()
	if w := p.waits[token]; w != nil && w.sk == sk {
		p.mu.Unlock()
		done()
		return p.join(token, sk)
	}
	ctx, cancel := context.WithCancel(stop)
	w := &parkedWait{sk: sk, cancel: cancel, done: make(chan struct{}), calls: 1}
	if p.waits == nil {
		p.waits = make(map[string]*parkedWait)
	}
	p.waits[token] = w
	p.mu.Unlock()
	go func() {
		defer done()
		g, labels, err := wait(ctx)
		cancel()
		p.mu.Lock()
		w.g, w.labels, w.err, w.finished = g, labels, err, true
		close(w.done)
		orphan := w.ended && !w.taken
		p.mu.Unlock()
		if orphan {
			release(w)
		}
	}()
	return w
}

// take answers the outcome of w, once done is closed, to a call waiting
// on it: w leaves the map, and a grant is that call's.
func (p *parking) take(token string, w *parkedWait) (distlock.TokenGrant, map[string]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w.calls--
	w.taken = true
	p.removeLocked(token, w)
	return w.g, w.labels, w.err
}

// leave counts off a call that ended without an outcome. With no call left
// on it, the wait ends parkTime later unless a call joins it, or at once
// if the call that left does not resume it.
func (p *parking) leave(token string, w *parkedWait, resumes bool, release func(*parkedWait)) {
	p.mu.Lock()
	if w.calls--; w.calls > 0 || w.ended {
		p.mu.Unlock()
		return
	}
	if resumes && !w.unwanted {
		w.idle = time.AfterFunc(parkTime, func() { p.expire(token, w, release) })
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.expire(token, w, release)
}

// expire ends w if no call joined it since it was left.
func (p *parking) expire(token string, w *parkedWait, release func(*parkedWait)) {
	p.mu.Lock()
	if w.calls > 0 || w.ended {
		p.mu.Unlock()
		return
	}
	p.removeLocked(token, w)
	orphan := w.finished && !w.taken
	p.mu.Unlock()
	w.cancel()
	if orphan {
		release(w)
	}
}

// end ends the wait parked for token, for a call that gives it up (one with
// no wait). If the wait got its grant, end returns it (ok), for that call to
// answer. A wait that calls still wait on ends when the last one leaves:
// a caller that gave up its call and at once its wait may be heard first on
// the second.
func (p *parking) end(token string) (g distlock.TokenGrant, labels map[string]string, ok bool) {
	p.mu.Lock()
	w := p.waits[token]
	if w == nil {
		p.mu.Unlock()
		return g, nil, false
	}
	if w.calls > 0 {
		w.unwanted = true
		p.mu.Unlock()
		return g, nil, false
	}
	if w.idle != nil {
		w.idle.Stop()
	}
	p.removeLocked(token, w)
	granted := w.finished && w.err == nil
	w.taken = granted
	p.mu.Unlock()
	w.cancel() // a wait still in the store releases a late grant itself
	if granted {
		return w.g, w.labels, true
	}
	return g, nil, false
}

// removeLocked takes w out of the map. p.mu is held.
func (p *parking) removeLocked(token string, w *parkedWait) {
	w.ended = true
	if p.waits[token] == w {
		delete(p.waits, token)
	}
}
