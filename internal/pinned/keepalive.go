package pinned

import "time"

// The keepalive rounds of every held lock run from one loop with one timer,
// so that taking a lock starts no timer of its own: on a busy machine a new
// timer earlier than the runtime's next one wakes a sleeping thread, which
// costs more than the lock's own work on the client. The same loop arms the
// watch of each held lock of a Watcher once it has lasted the watch delay (a
// goroutine per lock would cost as much). While locks are being taken the loop looks at
// least once every watch delay, so that a new lock never has to wake it; it
// exits once the backend holds no lock and took none since it last looked.

// scheduleLocked sets h's next keepalive round to at, or to the end of its
// lease if that comes first, and wakes the loop if it would sleep past it.
// The caller holds s.mu and h's Lock (or owns h alone).
func (s *Holds[C]) scheduleLocked(h *Hold[C], at time.Time) {
	if s.held[holdID{h.Key, h.Token}] != h {
		return // ended: no more rounds
	}
	h.due = at
	if h.deadline.Before(at) {
		h.due = h.deadline
	}
	if h.due.Before(s.kaDue) {
		s.kaDue = h.due
	}
	s.loopByLocked(h.due, h.due)
}

// watchLaterLocked has the loop arm h's watch d after now, at most d/4
// later. The caller holds s.mu; h has just been registered.
func (s *Holds[C]) watchLaterLocked(h *Hold[C], d time.Duration) {
	h.watchAt = time.Now().Add(d)
	s.fresh = append(s.fresh, h)
	s.tookLock = true
	s.loopByLocked(h.watchAt, h.watchAt.Add(d/4))
}

// loopByLocked makes the loop look at at, or at least by latest: it starts
// the loop, or wakes it if it would sleep past latest.
func (s *Holds[C]) loopByLocked(at, latest time.Time) {
	switch {
	case !s.kaRunning:
		s.kaRunning, s.kaNext = true, at
		s.wg.Add(1)
		go s.keepaliveLoop(at)
	case latest.Before(s.kaNext):
		s.kaNext = at
		s.wakeKeepaliveLocked()
	}
}

// wakeKeepaliveLocked makes the loop look at the held locks again.
func (s *Holds[C]) wakeKeepaliveLocked() {
	select {
	case s.kaWake <- struct{}{}:
	default: // a wake is pending already
	}
}

// keepaliveLoop starts each held lock's keepalive round when it is due, in a
// goroutine of its own, and arms each lock's watch once it is due, until the
// backend holds no lock and takes none, or closes.
func (s *Holds[C]) keepaliveLoop(next time.Time) {
	defer s.wg.Done()
	t := time.NewTimer(time.Until(next))
	defer t.Stop()
	var due, arm []*Hold[C]
	for {
		select {
		case <-t.C:
		case <-s.kaWake:
		}
		now := time.Now()
		s.mu.Lock()
		if s.closed.Load() || len(s.held) == 0 && !s.tookLock {
			s.kaRunning, s.kaDue = false, time.Time{}
			clear(s.fresh)
			s.fresh = s.fresh[:0]
			s.mu.Unlock()
			return
		}
		if !now.Before(s.kaDue) { // scheduleLocked lowers kaDue to every round it sets
			// Without a scheduled lock (every one is in a round, and its
			// next round is scheduled when it ends), look again after a while.
			s.kaDue = now.Add(max(s.cfg.Keepalive, time.Second))
			for _, h := range s.held {
				switch {
				case h.due.IsZero(): // in a round
				case !h.due.After(now):
					h.due = time.Time{}
					due = append(due, h)
				case h.due.Before(s.kaDue):
					s.kaDue = h.due
				}
			}
		}
		next = s.kaDue
		arm, next = s.takeArmedLocked(now, arm, next)
		s.kaNext = next
		s.mu.Unlock()
		for _, h := range due {
			go h.tick()
		}
		for _, h := range arm {
			any(h.conn).(Watcher).Lasted()
		}
		clear(due)
		clear(arm)
		due, arm = due[:0], arm[:0]
		t.Reset(time.Until(next))
	}
}

// takeArmedLocked appends to arm the held locks whose watch is due at now,
// drops the released ones before the first that is not due, and returns
// when the loop must look next (at the latest next). The caller holds s.mu.
func (s *Holds[C]) takeArmedLocked(now time.Time, arm []*Hold[C], next time.Time) ([]*Hold[C], time.Time) {
	d := s.cfg.WatchDelay
	i := 0
	for ; i < len(s.fresh); i++ { // in the order taken, so by watchAt
		h := s.fresh[i]
		if s.held[holdID{h.Key, h.Token}] != h {
			continue // released before its watch
		}
		if h.watchAt.After(now) {
			// When it is due, but a quarter delay after this look at the
			// soonest: locks held longer than the delay, taken in a stream,
			// then cost the loop at most four looks per delay.
			at := h.watchAt
			if soonest := now.Add(d / 4); at.Before(soonest) {
				at = soonest
			}
			next = earlier(next, at)
			break
		}
		arm = append(arm, h)
	}
	n := copy(s.fresh, s.fresh[i:])
	clear(s.fresh[n:])
	s.fresh = s.fresh[:n]
	if s.tookLock {
		// A lock taken from now on is due by now+1.25d: looking by now+d,
		// the loop needs no wake for it.
		s.tookLock = false
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
