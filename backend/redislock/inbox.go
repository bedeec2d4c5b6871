package redislock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// inbox holds a backend's waiters: per key, a line of them in arrival
// order, of which only the first is queued in Redis; and the backend's one
// subscription, to the channel <prefix>notify:<id>, on which a release tells
// one waiter of this backend, by its token, that it is its turn
// (queue.lua), and to <prefix>notify:lost, on which a forced release names
// the token it removed (lost.go). The channels are subscribed when a waiter
// first has to wait or a lock is first granted, and stay subscribed until
// Close. A release by this backend that grants
// the key to one of its own waiters hands the grant over here, without
// Redis.
type inbox struct {
	ps      pubsub
	channel string
	// lostChannel carries the tokens that forced releases removed and the
	// requests to release, which onLost is told (lost.go).
	lostChannel string
	onLost      func(payload string)
	onListening func()        // the lost channel's subscription is confirmed
	timeout     time.Duration // bounds one SUBSCRIBE

	mu      sync.Mutex
	waiters map[string]*mailbox // by token
	lines   map[string]*line    // by key
	// gaveUp holds, for a while, the tokens of waiters that stopped waiting
	// while first in their line, when a release may have picked them to
	// hand the key to: such a grant must be freed again.
	gaveUp map[string]time.Time
	// contended holds, for a while, the keys a waiter of this backend had
	// to queue for: a wait for one of them starts in the queue, without a
	// plain attempt first.
	contended map[string]time.Time
	sweptAt   time.Time // when contended was last swept
	state     subscription
	since     time.Time // when the pending SUBSCRIBE was sent
	closed    bool
}

// line is one key's waiters of this backend, in arrival order.
type line struct {
	waiters []*mailbox
	// passedOver counts the handoffs in a row from one of these waiters to
	// the next while other clients' waiters were queued.
	passedOver int
}

// maxPassOver is how many times in a row a backend hands a key from one of
// its waiters to the next while other clients' waiters are queued, before it
// releases the key to the first of those: a client with many waiters cannot
// starve the others, and one with few hands the key on at once.
const maxPassOver = 16

type subscription uint8

const (
	unsubscribed subscription = iota
	subscribing               // SUBSCRIBE sent, not confirmed
	subscribed                // confirmed: notices reach the waiters
)

// mailbox is one waiter's.
type mailbox struct {
	key  string
	next nextWaiter // what a release needs to hand the key to it
	// head is closed once the waiter is first in its line; afterGrant is set
	// before, if the waiter before it left holding the key, which this
	// backend then hands to it on release.
	head       chan struct{}
	afterGrant bool
	// wake: a notice, a subscription confirmed, the connection lost, or the
	// key released by this backend: look at the key again. Buffered.
	wake chan struct{}
	// granted: the key, granted by a release of this backend, or by
	// another client's (direct). Buffered.
	granted chan driver.Grant
	// refused is when the waiter sent the last step that queued it or kept
	// its place: a step that ran before any grant to it. Guarded by
	// inbox.mu.
	refused time.Time
}

// nextWaiter is a waiter as release.lua takes it.
type nextWaiter struct{ token, ttl, meta, member string }

func newInbox(st store, channel, lostChannel string, timeout time.Duration, onLost func(payload string), onListening func()) *inbox {
	ib := &inbox{channel: channel, lostChannel: lostChannel, onLost: onLost, onListening: onListening, timeout: timeout,
		waiters: make(map[string]*mailbox), lines: make(map[string]*line),
		gaveUp: make(map[string]time.Time), contended: make(map[string]time.Time)}
	ib.ps = st.newPubSub(pubsubEvents{message: ib.message, subscribed: ib.confirmed, lost: ib.lost})
	return ib
}

// join puts a waiter at the end of key's line and opens its mailbox.
func (ib *inbox) join(key string, next nextWaiter) (*mailbox, error) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	switch {
	case ib.closed:
		return nil, driver.ErrClosed
	case ib.waiters[next.token] != nil:
		return nil, fmt.Errorf("%w: token %q is already waiting", driver.ErrInvalidOption, next.token)
	}
	mb := &mailbox{key: key, next: next, head: make(chan struct{}), wake: make(chan struct{}, 1), granted: make(chan driver.Grant, 1)}
	ib.waiters[next.token] = mb
	ln := ib.lines[key]
	if ln == nil {
		ln = &line{}
		ib.lines[key] = ln
	}
	ln.waiters = append(ln.waiters, mb)
	if len(ln.waiters) == 1 {
		close(mb.head)
	}
	return mb, nil
}

// recentContention is how long a key counts as contended after a waiter of
// this backend had to queue for it.
const recentContention = time.Second

// idle reports whether no waiter of this backend waits for key, nor had to
// queue for it lately: then a wait starts with a plain attempt.
func (ib *inbox) idle(key string) bool {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	at, ok := ib.contended[key]
	return ib.lines[key] == nil && (!ok || time.Since(at) > recentContention)
}

// leave takes mb out of its line, promoting the next waiter if mb was
// first, and closes its mailbox: nothing is delivered to it after. holding
// says whether it leaves with the key.
func (ib *inbox) leave(mb *mailbox, holding bool) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	delete(ib.waiters, mb.next.token)
	ln := ib.lines[mb.key]
	if ln == nil {
		return
	}
	if i := slices.Index(ln.waiters, mb); i >= 0 {
		ln.waiters = slices.Delete(ln.waiters, i, i+1)
		if i == 0 && !holding {
			ib.noteGaveUpLocked(mb.next.token)
		}
		if i == 0 && len(ln.waiters) > 0 {
			ln.waiters[0].afterGrant = holding
			close(ln.waiters[0].head)
		}
	}
	if len(ln.waiters) == 0 {
		delete(ib.lines, mb.key)
	}
}

// noteGaveUpLocked records that the first waiter of a line, token, stopped
// waiting. A release picks a waiter to hand the key to, then runs its
// script, then hands the grant over (grant): the record need outlive that by
// little, and goes after a few request timeouts.
func (ib *inbox) noteGaveUpLocked(token string) {
	now := time.Now()
	for t, at := range ib.gaveUp {
		if now.Sub(at) > 3*ib.timeout {
			delete(ib.gaveUp, t)
		}
	}
	ib.gaveUp[token] = now
}

// first returns the first waiter of key's line, if any, and whether a
// release may hand it the key over other clients' queued waiters.
func (ib *inbox) first(key string) (nextWaiter, bool, bool) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ln := ib.lines[key]
	if ln == nil || len(ln.waiters) == 0 {
		return nextWaiter{}, false, false
	}
	return ln.waiters[0].next, ln.passedOver < maxPassOver, true
}

// released wakes the first waiter of key's line, if any, after this backend
// released the key for real, and starts the handoff count again.
func (ib *inbox) released(key string) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ln := ib.lines[key]; ln != nil && len(ln.waiters) > 0 {
		ln.passedOver = 0
		wake(ln.waiters[0].wake)
	}
}

// grant hands g to the waiter with token, a release's grant to it, and
// counts the handoff for key's line: over other clients' queued waiters, or
// not (which starts the count again). It reports false if the waiter
// stopped waiting without the key, so that the caller frees it again. A
// waiter that is gone with the key took it already: one of its own steps
// found the key granted before this hand-over came.
func (ib *inbox) grant(key, token string, g driver.Grant, over bool) bool {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	if ln := ib.lines[key]; ln != nil {
		if over {
			ln.passedOver++
		} else {
			ln.passedOver = 0
		}
	}
	mb := ib.waiters[token]
	if mb == nil {
		if _, ok := ib.gaveUp[token]; ok {
			delete(ib.gaveUp, token)
			return false
		}
		return true
	}
	select {
	case mb.granted <- g:
	default: // never happens: a token is granted once
	}
	wake(mb.wake)
	return true
}

// listening reports whether notices reach the waiters.
func (ib *inbox) listening() bool {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	return ib.state == subscribed
}

// listen reports whether notices reach the waiters. If they do not, and no
// SUBSCRIBE is pending (for up to the request timeout), it sends one, within
// ctx; its confirmation wakes every waiter.
func (ib *inbox) listen(ctx context.Context) bool {
	ib.mu.Lock()
	switch {
	case ib.closed:
		ib.mu.Unlock()
		return false
	case ib.state == subscribed:
		ib.mu.Unlock()
		return true
	case ib.state == subscribing && time.Since(ib.since) < ib.timeout:
		ib.mu.Unlock()
		return false
	}
	ib.state, ib.since = subscribing, time.Now()
	ib.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, ib.timeout)
	defer cancel()
	if err := ib.ps.subscribe(ctx, []string{ib.channel, ib.lostChannel}); err != nil {
		ib.mu.Lock()
		if ib.state == subscribing {
			ib.state = unsubscribed
		}
		ib.mu.Unlock()
	}
	return false
}

// message takes a notice (queue.lua's passOn), "<token> <fence>": the key
// granted to the waiter with token. A waiter that is gone need not be told:
// it left the queue with a script that frees the key if it was granted to
// it. On a Cluster a notice comes once from each master; the waiter takes
// the first.
func (ib *inbox) message(channel, payload string) {
	if channel == ib.lostChannel {
		ib.onLost(payload)
		return
	}
	if channel != ib.channel {
		return
	}
	token, fence, granted := strings.Cut(payload, " ")
	ib.mu.Lock()
	defer ib.mu.Unlock()
	mb := ib.waiters[token]
	if mb == nil {
		return
	}
	if granted {
		f, err := strconv.ParseUint(fence, 10, 64)
		if err == nil && !mb.refused.IsZero() {
			// The grant ran after the waiter's last refused step was sent:
			// its lease counts from then.
			select {
			case mb.granted <- driver.Grant{Fence: f, Sent: mb.refused}:
			default:
			}
		}
	}
	wake(mb.wake) // without a grant it can use, the waiter looks at the key
}

// refusedAt records that a step of the waiter sent at sent was refused: it
// queued, and its key is contended.
func (ib *inbox) refusedAt(mb *mailbox, sent time.Time) {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	mb.refused = sent
	ib.contended[mb.key] = sent
	if sent.Sub(ib.sweptAt) > recentContention {
		ib.sweptAt = sent
		for k, at := range ib.contended {
			if sent.Sub(at) > recentContention {
				delete(ib.contended, k)
			}
		}
	}
}

// confirmed marks the subscription live and wakes every waiter: a notice
// sent before it was live never came.
func (ib *inbox) confirmed(channel string) {
	if channel == ib.lostChannel {
		ib.onListening()
	}
	if channel != ib.channel {
		return
	}
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.state = subscribed
	ib.wakeAllLocked()
}

// lost forgets the subscription after the connection failed and wakes every
// waiter: a notice may have been missed. The next waiter to listen
// subscribes again.
func (ib *inbox) lost() {
	ib.mu.Lock()
	defer ib.mu.Unlock()
	ib.state = unsubscribed
	ib.wakeAllLocked()
}

func (ib *inbox) wakeAllLocked() {
	for _, mb := range ib.waiters {
		wake(mb.wake)
	}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// close closes the subscription connection.
func (ib *inbox) close() error {
	ib.mu.Lock()
	if ib.closed {
		ib.mu.Unlock()
		return nil
	}
	ib.closed = true
	ib.mu.Unlock()
	return ib.ps.close()
}
