package distlock

import (
	"container/heap"
	"sync"
	"time"
)

// schedule runs the ticks of all of a client's holds from one timer, armed
// for the hold due first. Arming a timer can wake a sleeping thread of the Go
// runtime, which on a busy machine costs more than the rest of a Lock; with
// one shared timer, taking a lock whose renewal is due after the timer's next
// firing, the common case, touches no timer at all.
type schedule struct {
	mu    sync.Mutex
	due   dueHeap
	timer *time.Timer // created on first use
	at    time.Time   // when timer fires; zero while it is not armed
}

// set (re)schedules h's tick at when.
func (s *schedule) set(h *hold, when time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h.due = when
	if h.slot < 0 {
		heap.Push(&s.due, h)
	} else {
		heap.Fix(&s.due, h.slot)
	}
	s.armLocked()
}

// drop unschedules h. The timer stays armed: firing with nothing due costs
// one wake-up, where disarming it would cost one per Release.
func (s *schedule) drop(h *hold) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.slot >= 0 {
		heap.Remove(&s.due, h.slot)
	}
}

// stop disarms the timer for good; the client is closing.
func (s *schedule) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
	s.at = time.Time{}
}

// armLocked makes the timer fire no later than the first hold's due time.
func (s *schedule) armLocked() {
	if len(s.due) == 0 {
		return
	}
	next := s.due[0].due
	if !s.at.IsZero() && !next.Before(s.at) {
		return // it fires early enough
	}
	s.at = next
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(next), s.fire)
	} else {
		s.timer.Reset(time.Until(next))
	}
}

// fire runs the ticks that are due, each in a goroutine of its own but the
// last, and arms the timer for the next.
func (s *schedule) fire() {
	s.mu.Lock()
	s.at = time.Time{}
	now := time.Now()
	var ready []*hold
	for len(s.due) > 0 && !s.due[0].due.After(now) {
		ready = append(ready, heap.Pop(&s.due).(*hold))
	}
	s.armLocked()
	s.mu.Unlock()
	for i, h := range ready {
		if i == len(ready)-1 {
			h.tick()
		} else {
			go h.tick()
		}
	}
}

// dueHeap orders holds by due time; each hold knows its slot in it (-1 when
// not scheduled). Guarded by schedule.mu.
type dueHeap []*hold

func (d dueHeap) Len() int           { return len(d) }
func (d dueHeap) Less(i, j int) bool { return d[i].due.Before(d[j].due) }
func (d dueHeap) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].slot, d[j].slot = i, j
}

func (d *dueHeap) Push(x any) {
	h := x.(*hold)
	h.slot = len(*d)
	*d = append(*d, h)
}

func (d *dueHeap) Pop() any {
	old := *d
	h := old[len(old)-1]
	old[len(old)-1] = nil
	h.slot = -1
	*d = old[:len(old)-1]
	return h
}
