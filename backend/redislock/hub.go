package redislock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

const (
	// subscribeDelay is how long a key must have had a waiter before its
	// channel is subscribed. The core watches once an attempt was refused,
	// and many such waits end within a few milliseconds; subscribing each
	// would double the traffic. The core's backoff poll covers the delay.
	subscribeDelay = 5 * time.Millisecond
	// unsubscribeLinger keeps a channel subscribed that long after its last
	// waiter left, so a contended key does not churn subscriptions.
	unsubscribeLinger = time.Second
	// resubscribeBackoff spaces retries of a failed SUBSCRIBE.
	resubscribeBackoff = 100 * time.Millisecond
)

// hub multiplexes one subscription connection across every waiter of a
// backend. Channels are refcounted by their waiters; a worker goroutine
// subscribes and unsubscribes in batches. A notice wakes the longest waiting
// waiter of its key only (the others would lose the race for the key anyway);
// one that leaves with a notice it did not use passes it on.
type hub struct {
	ps      pubsub
	timeout time.Duration // bounds one SUBSCRIBE or UNSUBSCRIBE
	kick    chan struct{}
	ctx     context.Context // cancelled by close
	cancel  context.CancelFunc
	done    chan struct{}

	mu       sync.Mutex
	topics   map[string]*topic
	sleeping bool // the worker waits for a kick, without a timer
	closed   bool
}

// topic is one release channel.
type topic struct {
	waiters []chan struct{} // in arrival order
	active  bool            // SUBSCRIBE sent (and not failed)
	// due is when the worker should look at the topic next: subscribe it if
	// it has waiters, unsubscribe it if not.
	due time.Time
}

func newHub(st store, timeout time.Duration) *hub {
	h := &hub{timeout: timeout, kick: make(chan struct{}, 1), done: make(chan struct{}), topics: make(map[string]*topic)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.ps = st.newPubSub(pubsubEvents{message: h.notify, subscribed: h.notify, lost: h.lost})
	go h.run()
	return h
}

// watch registers a waiter on channel.
func (h *hub) watch(channel string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, nil, fmt.Errorf("redislock: watch: %w", driver.ErrClosed)
	}
	t := h.topics[channel]
	if t == nil {
		t = &topic{}
		h.topics[channel] = t
	}
	if len(t.waiters) == 0 && !t.active {
		t.due = time.Now().Add(subscribeDelay)
		h.wakeWorkerLocked()
	}
	t.waiters = append(t.waiters, ch)
	var once sync.Once
	return ch, func() { once.Do(func() { h.unwatch(channel, ch) }) }, nil
}

func (h *hub) unwatch(channel string, ch chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.topics[channel]
	if t == nil {
		return
	}
	if i := slices.Index(t.waiters, ch); i >= 0 {
		t.waiters = slices.Delete(t.waiters, i, i+1)
	}
	switch {
	case len(t.waiters) > 0:
		if len(ch) > 0 {
			wake(t.waiters[0]) // pass on a notice this waiter did not use
		}
	case t.active:
		t.due = time.Now().Add(unsubscribeLinger)
		h.wakeWorkerLocked()
	default:
		delete(h.topics, channel)
	}
}

// notify wakes the longest waiting waiter of channel.
func (h *hub) notify(channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t := h.topics[channel]; t != nil && len(t.waiters) > 0 {
		wake(t.waiters[0])
	}
}

// lost forgets every subscription after the connection failed, wakes a
// waiter of each key (a notice may have been missed) and resubscribes.
func (h *hub) lost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	for name, t := range h.topics {
		t.active = false
		if len(t.waiters) == 0 {
			delete(h.topics, name)
			continue
		}
		t.due = now
		wake(t.waiters[0])
	}
	h.wakeWorkerLocked()
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// wakeWorkerLocked kicks the worker if it sleeps without a timer.
func (h *hub) wakeWorkerLocked() {
	if h.sleeping {
		h.sleeping = false
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// run is the worker: it sends the subscriptions and unsubscriptions that are
// due, then sleeps until the next one is due. While keys are being watched it
// looks every subscribeDelay, so that a watch costs no wake-up of its own; it
// sleeps until kicked only once no key has been watched for a while.
func (h *hub) run() {
	defer close(h.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	busy := time.Now()
	for {
		now := time.Now()
		sub, unsub, next := h.due(now)
		if len(sub)+len(unsub) > 0 {
			h.apply(sub, unsub)
			continue
		}
		if next > 0 || !h.idle() {
			busy = now
		}
		switch {
		case next > 0:
			timer.Reset(min(next, subscribeDelay))
		case now.Sub(busy) < unsubscribeLinger:
			timer.Reset(subscribeDelay)
		case h.sleep():
			timer.Stop()
		default:
			continue // a watch came in meanwhile
		}
		select {
		case <-h.ctx.Done():
			return
		case <-h.kick:
		case <-timer.C:
		}
	}
}

// idle reports whether no key is watched or subscribed.
func (h *hub) idle() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.topics) == 0
}

// sleep marks the worker as waiting for a kick, unless a topic appeared.
func (h *hub) sleep() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sleeping = len(h.topics) == 0
	return h.sleeping
}

// due returns the channels to subscribe and unsubscribe now, marking them,
// and how long until the next topic is due (0 if none).
func (h *hub) due(now time.Time) (sub, unsub []string, next time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, t := range h.topics {
		want := len(t.waiters) > 0
		if want == t.active {
			continue
		}
		if wait := t.due.Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		if want {
			t.active = true
			sub = append(sub, name)
		} else {
			delete(h.topics, name)
			unsub = append(unsub, name)
		}
	}
	return sub, unsub, next
}

// apply sends the subscription changes. A failed SUBSCRIBE is retried after
// resubscribeBackoff; a failed UNSUBSCRIBE is left to the connection's end.
func (h *hub) apply(sub, unsub []string) {
	ctx, cancel := context.WithTimeout(h.ctx, h.timeout)
	defer cancel()
	if len(unsub) > 0 {
		_ = h.ps.unsubscribe(ctx, unsub)
	}
	if len(sub) == 0 {
		return
	}
	if err := h.ps.subscribe(ctx, sub); err != nil {
		h.mu.Lock()
		retry := time.Now().Add(resubscribeBackoff)
		for _, name := range sub {
			if t := h.topics[name]; t != nil {
				t.active, t.due = false, retry
			}
		}
		h.mu.Unlock()
	}
}

// close stops the worker and closes the connection. Waiters still watching
// fall back to the client's poll.
func (h *hub) close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	<-h.done
	return h.ps.close()
}
