package server

import (
	"fmt"
	"time"

	"github.com/distlock/distlock"
)

// errMaxHold is the error of a renewal refused at the hold cap: it matches
// distlock.ErrNotHeld (NotFound), since the holder must stop as if it had
// lost the lock.
type errMaxHold struct{ held, limit time.Duration }

func (e errMaxHold) Error() string {
	return fmt.Sprintf("held %v, the max hold of its group is %v: not renewed, the lock ends at its lease: %v",
		e.held.Round(time.Millisecond), e.limit, distlock.ErrNotHeld)
}

func (errMaxHold) Unwrap() error { return distlock.ErrNotHeld }

// capLease returns lease, shortened to what is left of the hold cap of the
// lock sk that info describes, so that the store ends the lock at its cap,
// or an errMaxHold once too little is left for any lease. A lock without a
// cap, or whose grant time is unknown (taken without a server), keeps
// lease.
func (s *Server) capLease(sk string, info distlock.Info, lease time.Duration, now time.Time) (time.Duration, error) {
	limit := s.maxHold(sk)
	since := labelTime(info.Meta.Labels)
	if limit <= 0 || since.IsZero() {
		return lease, nil
	}
	held := now.Sub(since)
	left := limit - held
	if left >= lease {
		return lease, nil
	}
	s.mon.capReached(sk, info.Fence)
	if left < distlock.MinLease {
		return 0, errMaxHold{held: held, limit: limit}
	}
	return left, nil
}

// capReached marks the hold of sk with fence, if the monitor tracks it, as
// one that ends at its cap: its end is then a LossMaxHold, not an expiry.
func (m *monitor) capReached(sk string, fence uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t := m.held[sk]; t != nil && t.info.Fence == fence && !t.capped {
		t.capped = true
		m.bumpLocked()
	}
}
