package distlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// acquireWaiting takes the lock within r.Wait and ctx, using the backend's
// native queue if it has one; otherwise this client's waiters for the key
// line up first come, first served, and the one at the head retries on the
// backend's release notices or a capped jittered backoff poll.
// On return req.Token is the token of the grant.
func (c *Client) acquireWaiting(ctx context.Context, r *Request, req *AcquireRequest) (Grant, time.Time, error) {
	if r.Wait == 0 {
		g, sent, err := c.attempt(ctx, r, req)
		if errors.Is(err, ErrNotAcquired) {
			err = fmt.Errorf("distlock: lock %q: %w", r.Key, ErrNotAcquired)
		}
		return g, sent, err
	}
	wctx := ctx
	if r.Wait > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, r.Wait)
		defer cancel()
	}
	notAcquired := func(last error) error {
		err := fmt.Errorf("distlock: lock %q: %w", r.Key, ErrNotAcquired)
		return errors.Join(err, ctx.Err(), last)
	}

	if w, ok := c.backend.(Waiter); ok {
		sent := time.Now()
		g, err := w.AcquireWait(wctx, *req)
		switch {
		case err == nil:
			if !g.Sent.IsZero() {
				sent = g.Sent
			}
			return g, sent, nil
		case errors.Is(err, ErrNotAcquired):
			return Grant{}, sent, notAcquired(nil)
		default:
			c.releaseAbandoned(r, req.Token)
			return Grant{}, sent, err
		}
	}

	if c.lines.empty(r.Key) {
		// Nobody of ours waits: try before paying for a place in the line.
		if g, sent, err := c.attempt(wctx, r, req); err == nil {
			return g, sent, nil
		}
	}
	turn := c.lines.join(r.Key)
	defer c.lines.leave(r.Key, turn)
	select {
	case <-turn.head:
	case <-wctx.Done():
		return Grant{}, time.Now(), notAcquired(nil)
	}

	bo := backoff{min: time.Millisecond, max: 50 * time.Millisecond}
	notifier, _ := c.backend.(Notifier)
	var (
		notices <-chan struct{}
		watched bool // Watch is tried once: a backend that cannot notify is polled
		lastErr error
	)
	for {
		g, sent, err := c.attempt(wctx, r, req)
		if err == nil {
			return g, sent, nil
		}
		if !errors.Is(err, ErrNotAcquired) {
			lastErr = err // a store failure: keep trying while the wait lasts
		}
		if wctx.Err() != nil {
			return Grant{}, sent, notAcquired(lastErr)
		}
		if notifier != nil && !watched {
			// Subscribe only once the key turned out to be held, then try
			// again at once: a release before the subscription has no notice.
			watched = true
			if ch, stop, err := notifier.Watch(wctx, r.Key); err == nil {
				defer stop()
				notices = ch
				// Notices do the work; the poll only catches lost notices and expiries.
				bo = backoff{min: 5 * time.Millisecond, max: 100 * time.Millisecond}
				continue
			}
		}
		t := time.NewTimer(bo.next())
		select {
		case <-wctx.Done():
			t.Stop()
			return Grant{}, sent, notAcquired(lastErr)
		case <-notices:
			t.Stop()
		case <-turn.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// lines holds, per key, this client's waiters in arrival order, so that a
// goroutine coming back for a key cannot barge ahead of those already
// waiting, and only the one at the head loads the store. A release by this
// client wakes the head at once, without waiting for the store's notice.
// Fairness across clients is the store's to give (etcd and ZooKeeper queue
// natively).
type lines struct {
	waiting atomic.Int64 // waiters in all lines, read without the lock
	mu      sync.Mutex
	byKey   map[string][]*turn
}

// turn is one waiter's place in a line.
type turn struct {
	head chan struct{} // closed when the waiter reaches the head
	wake chan struct{} // a local release of the key; buffered
}

// empty reports whether no waiter of this client is in key's line.
func (l *lines) empty(key string) bool {
	if l.waiting.Load() == 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.byKey[key]) == 0
}

// join queues a waiter for key.
func (l *lines) join(key string) *turn {
	t := &turn{head: make(chan struct{}), wake: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey = make(map[string][]*turn)
	}
	l.waiting.Add(1)
	q := append(l.byKey[key], t)
	l.byKey[key] = q
	if len(q) == 1 {
		close(t.head)
	}
	return t
}

// leave removes t from key's line and promotes the next waiter if t was at
// the head.
func (l *lines) leave(key string, t *turn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	q := l.byKey[key]
	for i, w := range q {
		if w != t {
			continue
		}
		l.waiting.Add(-1)
		q = append(q[:i], q[i+1:]...)
		if i == 0 && len(q) > 0 {
			close(q[0].head)
		}
		break
	}
	if len(q) == 0 {
		delete(l.byKey, key)
	} else {
		l.byKey[key] = q
	}
}

// released wakes the waiter at the head of key's line, if any.
func (l *lines) released(key string) {
	if l.waiting.Load() == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if q := l.byKey[key]; len(q) > 0 {
		select {
		case q[0].wake <- struct{}{}:
		default:
		}
	}
}
