package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
)

// parkTime is how long a resumable wait keeps its place in the key's queue
// after its call ended without a grant, for the caller's next call.
const parkTime = 2 * time.Second

// maxCallsPerWait bounds the calls waiting on one parked wait at once: its
// caller's call, and a retry or two of it. A wait counts once against its
// tenant's waiters, so without a bound one request id could hold any
// number of calls open.
const maxCallsPerWait = 4

// parking keeps the waits of the Acquire calls that will be resumed
// (AcquireRequest.resumes): a long wait is made of several calls, and
// without parking each call's end took the waiter out of the key's queue,
// so that its next call queued at the tail. A parked wait runs in the store
// apart from its calls. A call that ends without a grant leaves it; the
// next call with the same request id (so the same token) joins it, and
// gets the grant it made meanwhile, if any. parkTime after the last call
// left with none back, the wait ends, and a grant nobody took is released.
type parking struct {
	// release frees what an ended wait got that no call took.
	release func(token string, w *parkedWait)

	mu     sync.Mutex
	waits  map[string]*parkedWait // by token
	closed bool                   // after close: no wait is kept
	wg     sync.WaitGroup         // the waits' goroutines
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

// orphanLocked reports whether w's outcome is nobody's: it ended, and no
// call took it or waits to. p.mu is held.
func (w *parkedWait) orphanLocked() bool { return w.ended && w.finished && !w.taken && w.calls == 0 }

// join returns the wait parked for token on sk, counting one more call on
// it, or nil if there is none. A wait that has maxCallsPerWait calls on it
// already is refused with ResourceExhausted.
func (p *parking) join(token, sk string) (*parkedWait, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.waits[token]
	if w == nil || w.sk != sk {
		return nil, nil
	}
	if err := w.joinLocked(); err != nil {
		return nil, err
	}
	return w, nil
}

// joinLocked counts one more call on w, unless it has maxCallsPerWait.
// parking.mu is held.
func (w *parkedWait) joinLocked() error {
	if w.calls >= maxCallsPerWait {
		return connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("%d calls already wait under this request_id, the most one may have", maxCallsPerWait))
	}
	w.calls++
	if w.idle != nil {
		w.idle.Stop()
		w.idle = nil
	}
	return nil
}

// park starts a wait in the store for token on sk, with the call that asks
// for it counted on it: wait runs it until the context it is given ends
// (when the wait is given up or the server stops), and done is called once
// it returned. If another call parked a wait for token first, park joins
// that one, as join does.
func (p *parking) park(stop context.Context, token, sk string, wait func(context.Context) (distlock.TokenGrant, map[string]string, error), done func()) (*parkedWait, error) {
	p.mu.Lock()
	if w := p.waits[token]; w != nil && w.sk == sk {
		err := w.joinLocked()
		p.mu.Unlock()
		done()
		if err != nil {
			return nil, err
		}
		return w, nil
	}
	ctx, cancel := context.WithCancel(stop)
	w := &parkedWait{sk: sk, cancel: cancel, done: make(chan struct{}), calls: 1}
	if p.closed {
		w.ended = true // the server stops: the wait ends with its call
		cancel()
	} else {
		if p.waits == nil {
			p.waits = make(map[string]*parkedWait)
		}
		p.waits[token] = w
	}
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		defer done()
		g, labels, err := wait(ctx)
		cancel()
		p.mu.Lock()
		w.g, w.labels, w.err, w.finished = g, labels, err, true
		close(w.done)
		orphan := w.orphanLocked()
		p.mu.Unlock()
		if orphan {
			p.release(token, w)
		}
	}()
	return w, nil
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
func (p *parking) leave(token string, w *parkedWait, resumes bool) {
	p.mu.Lock()
	if w.calls--; w.calls > 0 || w.ended {
		p.mu.Unlock()
		return
	}
	if resumes && !w.unwanted {
		w.idle = time.AfterFunc(parkTime, func() { p.expire(token, w) })
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.expire(token, w)
}

// expire ends w if no call joined it since it was left.
func (p *parking) expire(token string, w *parkedWait) {
	p.mu.Lock()
	if w.calls > 0 || w.ended {
		p.mu.Unlock()
		return
	}
	p.removeLocked(token, w)
	orphan := w.orphanLocked()
	p.mu.Unlock()
	w.cancel()
	if orphan {
		p.release(token, w)
	}
}

// end ends the wait parked for token, for a call that gives it up (one with
// no wait). If the wait got its grant, end returns it (ok), for that call to
// answer. queued says that the wait was still in the key's queue, behind
// its holder: the key was held as it ended. A wait that calls still wait on
// ends when the last one leaves: a caller that gave up its call and at once
// its wait may be heard first on the second.
func (p *parking) end(token string) (g distlock.TokenGrant, labels map[string]string, ok, queued bool) {
	p.mu.Lock()
	w := p.waits[token]
	if w == nil {
		p.mu.Unlock()
		return g, nil, false, false
	}
	if w.calls > 0 {
		w.unwanted = true
		queued = !w.finished
		p.mu.Unlock()
		return g, nil, false, queued
	}
	if w.idle != nil {
		w.idle.Stop()
	}
	p.removeLocked(token, w)
	granted := w.finished && w.err == nil
	w.taken = granted
	queued = !w.finished
	p.mu.Unlock()
	w.cancel() // a wait still in the store releases a late grant itself
	if granted {
		return w.g, w.labels, true, false
	}
	return g, nil, false, queued
}

// close ends every parked wait, releases the grants nobody took, and waits
// for the waits' goroutines, for a server that stops: a caller's next call
// goes to another instance, which knows nothing of the place kept here.
func (p *parking) close() {
	p.mu.Lock()
	p.closed = true
	waits := p.waits
	p.waits = nil
	var orphans []string
	for token, w := range waits {
		if w.idle != nil {
			w.idle.Stop()
		}
		w.ended = true
		if w.orphanLocked() {
			orphans = append(orphans, token)
		}
		w.cancel()
	}
	p.mu.Unlock()
	for _, token := range orphans {
		p.release(token, waits[token])
	}
	p.wg.Wait()
}

// removeLocked takes w out of the map. p.mu is held.
func (p *parking) removeLocked(token string, w *parkedWait) {
	w.ended = true
	if p.waits[token] == w {
		delete(p.waits, token)
	}
}
