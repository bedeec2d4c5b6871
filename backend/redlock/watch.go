package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

var _ driver.Notifier = (*Backend)(nil)

// Watch returns a channel that fires when key was released or force
// released: redislock's Watch on every node, whose notices it gathers. A
// release by a holder frees the key on the majority that granted it, so
// the channel fires once a majority of the nodes announced a release (or a
// confirmed or lost subscription, after which a notice may be missing). A
// notice from fewer, such as the undoing of an attempt that got no
// majority, fires it only after a random wait of up to forty round trips
// (partialWait times the delay below), as a poll would.
//
// Every process waiting for key hears the same release at the same
// moment; were they all to try at once, the nodes could split their votes
// so that nobody gets a majority. So the channel fires after a random
// delay, up to four times the round trip of the backend's last Acquire
// that every node answered (at least minRoundTrip): the first to try
// usually wins on every node before the others ask.
//
// The calls to Watch for one key share one watch on the nodes, which
// stays for lingerFor after the last of them stops while every node has
// it: a process that waits for a key again and again enters the nodes'
// watchers once, not at every wait.
//
// Watch returns once a majority of the nodes took the watch, or after the
// node timeout (MinNodeTimeout if not set); a node that answers later joins
// the watch then, and one that fails sends no notices: the caller's poll
// finds what they would have told. It fails only for a bad key or a closed
// backend. stop must be called once.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := b.checkRequest(key, "-", nil); err != nil {
		return nil, nil, fmt.Errorf("redlock: watch %q: %w", key, err)
	}
	wake := make(chan struct{}, 1)
	if w := b.watches.join(key, wake); w != nil {
		return wake, b.watches.leaver(w, wake), nil
	}
	w := b.startWatch(ctx, key)
	if !b.watches.add(w, wake) {
		w.stop() // a concurrent Watch added one first, or the backend closed
		if w = b.watches.join(key, wake); w == nil {
			return nil, nil, fmt.Errorf("redlock: watch %q: %w", key, driver.ErrClosed)
		}
	}
	return wake, b.watches.leaver(w, wake), nil
}

// startWatch watches key on every node for a shared watch, and returns once
// a majority took it, or after the node timeout or ctx.
func (b *Backend) startWatch(ctx context.Context, key string) *sharedWatch {
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx)) // it outlives this call
	w := &sharedWatch{key: key, cancel: cancel}
	entered := make(chan bool, len(b.nodes))
	heard := make(chan int, len(b.nodes))
	for i, n := range b.nodes {
		w.wg.Go(func() {
			notices, stop, err := n.b.Watch(wctx, key)
			entered <- err == nil
			if err != nil {
				return
			}
			w.running.Add(1)
			defer stop()
			for {
				select {
				case <-wctx.Done():
					return
				case <-notices:
					select {
					case heard <- i:
					case <-wctx.Done():
						return
					}
				}
			}
		})
	}
	w.wg.Go(func() { b.gather(wctx, heard, func() { b.watches.notify(w) }) })
	t := time.NewTimer(b.cfg.watchWait())
	defer t.Stop()
	for ok, answered := 0, 0; ok < b.quorum && answered < len(b.nodes); answered++ {
		select {
		case e := <-entered:
			if e {
				ok++
			}
		case <-t.C:
			return w
		case <-ctx.Done():
			return w
		}
	}
	return w
}

// lingerFor is how long a key's watch stays on the nodes after its last
// caller stopped, for the next wait: a little longer than a client takes
// between one turn on a key and the next.
const lingerFor = time.Second

// sharedWatch is one key's watch on every node (startWatch), shared by the
// callers of Watch for the key.
type sharedWatch struct {
	key     string
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	running atomic.Int32 // the nodes whose watch runs
	stopped sync.Once

	// Guarded by watches.mu:
	subs   []chan struct{} // the callers' channels
	linger *time.Timer     // set while nobody uses the watch
}

// stop ends the watch on every node; it may be called more than once.
func (w *sharedWatch) stop() {
	w.stopped.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
}

// watches holds the backend's shared watches by key.
type watches struct {
	nodes  int
	mu     sync.Mutex
	byKey  map[string]*sharedWatch
	closed bool
}

// join adds wake to key's watch, if there is one, and returns it.
func (ws *watches) join(key string, wake chan struct{}) *sharedWatch {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	w := ws.byKey[key]
	if w != nil {
		if w.linger != nil {
			w.linger.Stop() // if it has fired, it finds a caller and keeps the watch
			w.linger = nil
		}
		w.subs = append(w.subs, wake)
	}
	return w
}

// add makes w key's watch with wake as its caller, unless the key has one
// already or the backend closed.
func (ws *watches) add(w *sharedWatch, wake chan struct{}) bool {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if ws.closed || ws.byKey[w.key] != nil {
		return false
	}
	if ws.byKey == nil {
		ws.byKey = make(map[string]*sharedWatch)
	}
	w.subs = []chan struct{}{wake}
	ws.byKey[w.key] = w
	return true
}

// notify wakes every caller of w, each at most once until it reads.
func (ws *watches) notify(w *sharedWatch) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, wake := range w.subs {
		select {
		case wake <- struct{}{}:
		default: // a wake is pending already
		}
	}
}

// leaver returns the stop of wake's call: it leaves w, which lingers once
// nobody uses it if every node has it, and else ends.
func (ws *watches) leaver(w *sharedWatch, wake chan struct{}) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			ws.mu.Lock()
			w.subs = slices.DeleteFunc(w.subs, func(c chan struct{}) bool { return c == wake })
			if len(w.subs) > 0 {
				ws.mu.Unlock()
				return
			}
			if ws.byKey[w.key] == w && int(w.running.Load()) == ws.nodes {
				w.linger = time.AfterFunc(lingerFor, func() { ws.expire(w) })
				ws.mu.Unlock()
				return
			}
			if ws.byKey[w.key] == w {
				delete(ws.byKey, w.key)
			}
			ws.mu.Unlock()
			w.stop()
		})
	}
}

// expire ends w if nobody has used it since it began to linger.
func (ws *watches) expire(w *sharedWatch) {
	ws.mu.Lock()
	if len(w.subs) > 0 || ws.byKey[w.key] != w {
		ws.mu.Unlock()
		return
	}
	delete(ws.byKey, w.key)
	w.linger = nil
	ws.mu.Unlock()
	w.stop()
}

// close ends every watch; Watch fails after it.
func (ws *watches) close() {
	ws.mu.Lock()
	ws.closed = true
	all := ws.byKey
	ws.byKey = nil
	for _, w := range all {
		if w.linger != nil {
			w.linger.Stop()
		}
	}
	ws.mu.Unlock()
	for _, w := range all {
		w.stop()
	}
}

// gather calls wake, after a random delay, once the nodes that sent a
// notice to heard (by index) are a majority, or a while after the first of
// them if they are fewer (see Watch), until ctx ends.
func (b *Backend) gather(ctx context.Context, heard <-chan int, wake func()) {
	var (
		from    = make([]bool, len(b.nodes))
		count   int
		partial <-chan time.Time
	)
	fire := func() {
		clear(from)
		count, partial = 0, nil
		t := time.NewTimer(b.noticeDelay())
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for len(heard) > 0 { // notices of the same release, come during the delay
			<-heard
		}
		wake()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case i := <-heard:
			if !from[i] {
				from[i] = true
				count++
			}
			if count >= b.quorum {
				fire()
			} else if partial == nil {
				partial = time.After(partialWait * b.noticeDelay())
			}
		case <-partial:
			fire()
		}
	}
}

// noticeDelay is a random delay in [0, 4×the last Acquire's round trip),
// the round trip being at least minRoundTrip.
func (b *Backend) noticeDelay() time.Duration {
	window := 4 * max(time.Duration(b.lastRoundTrip.Load()), minRoundTrip)
	return rand.N(window)
}

// partialWait is how many of noticeDelay's delays gather waits for a
// majority of notices before it fires on fewer.
const partialWait = 10

// minRoundTrip is the least round trip noticeDelay assumes.
const minRoundTrip = 500 * time.Microsecond
