package pglock

import "time"

// The keepalive rounds of every held lock run from one loop with one timer,
// so that taking a lock starts no timer of its own: on a busy machine a new
// timer earlier than the runtime's next one wakes a sleeping thread, which
// costs more than the lock's own work on the client. The loop runs while the
// backend holds locks and exits when it holds none.

// scheduleLocked sets p's next keepalive round to at, or to the end of its
// lease if that comes first, and wakes the loop if it would sleep past it.
// The caller holds b.mu and p.mu (or owns p alone).
func (b *Backend) scheduleLocked(p *pinned, at time.Time) {
	if b.held[p.token] != p {
		return // ended: no more rounds
	}
	p.due = at
	if p.deadline.Before(at) {
		p.due = p.deadline
	}
	switch {
	case !b.kaRunning:
		b.kaRunning, b.kaNext = true, p.due
		b.wg.Add(1)
		go b.keepaliveLoop(p.due)
	case p.due.Before(b.kaNext):
		b.kaNext = p.due
		b.wakeKeepaliveLocked()
	}
}

// wakeKeepaliveLocked makes the loop look at the held locks again.
func (b *Backend) wakeKeepaliveLocked() {
	select {
	case b.kaWake <- struct{}{}:
	default: // a wake is pending already
	}
}

// keepaliveLoop starts each held lock's keepalive round when it is due, in a
// goroutine of its own, until the backend holds no lock or closes.
func (b *Backend) keepaliveLoop(next time.Time) {
	defer b.wg.Done()
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	var due []*pinned
	for {
		select {
		case <-t.C:
		case <-b.kaWake:
		}
		now := time.Now()
		b.mu.Lock()
		if b.closed.Load() || len(b.held) == 0 {
			b.kaRunning = false
			b.mu.Unlock()
			return
		}
		// Without a scheduled lock (every one is in a round, and its next
		// round wakes the loop when scheduled), look again after a while.
		next = now.Add(max(b.opts.keepalive, time.Second))
		due = due[:0]
		for _, p := range b.held {
			switch {
			case p.due.IsZero(): // in a round
			case !p.due.After(now):
				p.due = time.Time{}
				due = append(due, p)
			case p.due.Before(next):
				next = p.due
			}
		}
		b.kaNext = next
		b.mu.Unlock()
		for _, p := range due {
			go p.tick()
		}
		clear(due)
		t.Reset(time.Until(next))
	}
}
