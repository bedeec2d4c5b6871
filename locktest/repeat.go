package locktest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// repeatGrant: an acquisition repeated by the token that holds the key (a
// retry whose first reply was lost, a lock service's client re-sending a
// request) is either refused with ErrNotAcquired or granted again with the
// same fence and a lease that runs from the repeat: the store keeps the key
// for that token at least until the repeat's Sent plus its lease, so a
// waiter, even one that has been waiting since the first grant, cannot get
// in while the repeater counts itself valid.
func (s *suite) repeatGrant(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	const lease = 2 * time.Second
	token := fmt.Sprintf("%016x%016x", time.Now().UnixNano(), s.seq.Add(1)) // as long as the tokens a client makes
	first, err := a.AcquireToken(ctx, key, token, distlock.WithLease(lease))
	if err != nil {
		t.Fatalf("first grant: %v", err)
	}
	defer func() { _ = a.ReleaseToken(ctx, key, token) }()

	type result struct {
		l   *distlock.Lock
		at  time.Time
		err error
	}
	waited := make(chan result, 1)
	go func() {
		l, err := b.Lock(ctx, key, distlock.WithWait(3*lease))
		waited <- result{l, time.Now(), err}
	}()
	time.Sleep(time.Until(first.Sent.Add(lease * 6 / 10)))
	again, err := a.AcquireToken(ctx, key, token, distlock.WithLease(lease))
	w := <-waited
	if w.err != nil {
		t.Fatalf("waiter: %v", w.err)
	}
	defer w.l.Release(ctx)
	valid, what := first.Sent.Add(first.Lease), "the first grant's validity (the repeat was refused)"
	switch {
	case errors.Is(err, distlock.ErrNotAcquired): // the first grant's lease stands
	case err != nil:
		t.Fatalf("repeat: %v", err)
	case again.Fence != first.Fence:
		t.Fatalf("repeat granted fence %d, want the first grant's %d", again.Fence, first.Fence)
	default:
		valid, what = again.Sent.Add(again.Lease), "the repeated grant's validity"
	}
	if w.at.Before(valid) {
		t.Errorf("a waiter got the key %v before %s ended", valid.Sub(w.at), what)
	}
	if w.l.Fence() <= first.Fence {
		t.Errorf("the waiter's fence %d is not above the repeated grant's %d", w.l.Fence(), first.Fence)
	}
}
