package pglock

import "time"

// The keepalive rounds of every held lock run from one loop with one timer,
// so that taking a lock starts no timer of its own: on a busy machine a new
// timer earlier than the runtime's next one wakes a sleeping thread, which
// costs more than the lock's own work on the client. The same loop arms the
// watch of each held lock once it has lasted the watch delay (a goroutine
// per lock would cost as much). While locks are being taken the loop looks at
// least once every watch delay, so that a new lock never has to wake it; it
// exits once the backend holds no lock and took none since it last looked.

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
	if p.due.Before(b.kaDue) {
		b.kaDue = p.due
	}
	b.loopByLocked(p.due, p.due)
}

// watchLaterLocked has the loop arm p's watch d after now, at most d/4
// later. The caller holds b.mu; p has just been registered.
func (b *Backend) watchLaterLocked(p *pinned, d time.Duration) {
	p.watchAt = time.Now().Add(d)
	b.fresh = append(b.fresh, p)
	b.tookLock = true
	b.loopByLocked(p.watchAt, p.watchAt.Add(d/4))
}

// loopByLocked makes the loop look at at, or at least by latest: it starts
// the loop, or wakes it if it would sleep past latest.
func (b *Backend) loopByLocked(at, latest time.Time) {
	switch {
	case !b.kaRunning:
		b.kaRunning, b.kaNext = true, at
		b.wg.Add(1)
		go b.keepaliveLoop(at)
	case latest.Before(b.kaNext):
		b.kaNext = at
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
// goroutine of its own, and arms each lock's watch once it is due, until the
// backend holds no lock and takes none, or closes.
func (b *Backend) keepaliveLoop(next time.Time) {
	defer b.wg.Done()
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	var due, arm []*pinned
	for {
		select {
		case <-t.C:
		case <-b.kaWake:
		}
		now := time.Now()
		b.mu.Lock()
		if b.closed.Load() || len(b.held) == 0 && !b.tookLock {
			b.kaRunning, b.kaDue = false, time.Time{}
			clear(b.fresh)
			b.fresh = b.fresh[:0]
			b.mu.Unlock()
			return
		}
		if !now.Before(b.kaDue) { // scheduleLocked lowers kaDue to every round it sets
			// Without a scheduled lock (every one is in a round, and its
			// next round is scheduled when it ends), look again after a while.
			b.kaDue = now.Add(max(b.opts.keepalive, time.Second))
			for _, p := range b.held {
				switch {
				case p.due.IsZero(): // in a round
				case !p.due.After(now):
					p.due = time.Time{}
					due = append(due, p)
				case p.due.Before(b.kaDue):
					b.kaDue = p.due
				}
			}
		}
		next = b.kaDue
		arm, next = b.takeArmedLocked(now, arm, next)
		b.kaNext = next
		b.mu.Unlock()
		for _, p := range due {
			go p.tick()
		}
		for _, p := range arm {
			p.arm()
		}
		clear(due)
		clear(arm)
		due, arm = due[:0], arm[:0]
		t.Reset(time.Until(next))
	}
}

// takeArmedLocked appends to arm the held locks whose watch is due at now,
// drops the released ones before the first that is not due, and returns
// when the loop must look next (at the latest next). The caller holds b.mu.
func (b *Backend) takeArmedLocked(now time.Time, arm []*pinned, next time.Time) ([]*pinned, time.Time) {
	d := b.opts.watchDelay
	i := 0
	for ; i < len(b.fresh); i++ { // in the order taken, so by watchAt
		p := b.fresh[i]
		if b.held[p.token] != p {
			continue // released before its watch
		}
		if p.watchAt.After(now) {
			// When it is due, but a quarter delay after this look at the
			// soonest: locks held longer than the delay, taken in a stream,
			// then cost the loop at most four looks per delay.
			at := p.watchAt
			if soonest := now.Add(d / 4); at.Before(soonest) {
				at = soonest
			}
			next = earlier(next, at)
			break
		}
		arm = append(arm, p)
	}
	n := copy(b.fresh, b.fresh[i:])
	clear(b.fresh[n:])
	b.fresh = b.fresh[:n]
	if b.tookLock {
		// A lock taken from now on is due by now+1.25d: looking by now+d,
		// the loop needs no wake for it.
		b.tookLock = false
		next = earlier(next, now.Add(d))
	}
	return arm, next
}

// earlier is the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
