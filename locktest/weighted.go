package locktest

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// weighted runs the contract of driver.WeightedPermits, for backends that
// claim it; on the others a hold of several permits must say
// errors.ErrUnsupported.
func (s *suite) weighted(t *testing.T) {
	s.capability(t, func(b driver.Backend) bool { _, ok := b.(driver.WeightedPermits); return ok },
		func(c *distlock.Client) error {
			sem, err := c.Semaphore(s.key(t), 2)
			if err != nil {
				return err
			}
			defer sem.Close()
			_, err = sem.TryAcquireN(testContext(t, time.Minute), 2)
			return err
		},
		[]subtest{
			{"NPermitsInOneHold", s.weightedHold},
			{"TokenHold", s.weightedToken},
			{"LargeRequestNotStarved", s.weightedNotStarved},
			{"WaitersServedInOrder", s.weightedOrder},
			{"NeverOverTheLimit", s.weightedContended},
			{"BadCounts", s.weightedBad},
		})
}

// A hold of 3 of 5 permits counts 3: a second of 3 is refused, two single
// permits fit beside it and a third does not; released, its 3 are free.
// Inspect shows it once, with its count.
func (s *suite) weightedHold(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a, b := newSemaphore(t, s.client(t), name, 5), newSemaphore(t, s.client(t), name, 5)
	three, err := a.AcquireN(ctx, 3, distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquireN(ctx, 3); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("3 more of 5 beside a hold of 3: %v, want ErrNotAcquired", err)
	}
	var singles []*distlock.Lock
	for range 2 {
		l, err := b.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("a single permit beside a hold of 3 of 5: %v", err)
		}
		singles = append(singles, l)
	}
	if _, err := b.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a sixth permit of 5: %v, want ErrNotAcquired", err)
	}
	info, err := a.Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(info.Held, func(i distlock.Info) bool { return i.Fence == three.Fence() })
	if len(info.Held) != 3 || i < 0 || info.Held[i].Permits != 3 {
		t.Fatalf("Inspect: %+v; want three holds, one of 3 permits at fence %d", info.Held, three.Fence())
	}
	if err := three.Release(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := b.TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatalf("3 permits once the hold of 3 was released: %v", err)
	}
	if again.Fence() <= singles[1].Fence() {
		t.Errorf("the new hold's fence %d is not above the last permit's %d", again.Fence(), singles[1].Fence())
	}
	for _, l := range append(singles, again) {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A hold of 2 of 3 permits taken for a holder elsewhere is renewed and
// released by its token, as a hold of one is (through the backend that
// took it: pglock keeps a hold on a session of that backend).
func (s *suite) weightedToken(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a, b := newSemaphore(t, s.client(t), name, 3), newSemaphore(t, s.client(t), name, 3)
	const token = "locktest-weighted-token-0001"
	if _, err := a.AcquireTokenN(ctx, 2, token, distlock.WithWait(10*time.Second), distlock.WithLease(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquireN(ctx, 2); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("2 more of 3 beside a token's hold of 2: %v, want ErrNotAcquired", err)
	}
	if err := a.RenewToken(ctx, token, time.Minute); err != nil {
		t.Fatalf("renew the hold of 2 by its token: %v", err)
	}
	if err := a.ReleaseToken(ctx, token); err != nil {
		t.Fatalf("release the hold of 2 by its token: %v", err)
	}
	l, err := b.TryAcquireN(ctx, 3)
	if err != nil {
		t.Fatalf("all 3 permits once the token's hold was released: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A request for all 3 permits waits behind two single holders; once it
// waits, single requests are refused though a permit is free, so a stream
// of them cannot starve it; when the holders leave it gets in.
func (s *suite) weightedNotStarved(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a, b := newSemaphore(t, s.client(t), name, 3), newSemaphore(t, s.client(t), name, 3)
	var holders []*distlock.Lock
	for range 2 {
		l, err := a.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, l)
	}
	got := make(chan *distlock.Lock, 1)
	fail := make(chan error, 1)
	go func() {
		l, err := b.AcquireN(ctx, 3, distlock.WithWait(30*time.Second))
		if err != nil {
			fail <- err
			return
		}
		got <- l
	}()
	deadline := time.Now().Add(10 * time.Second)
	for { // single requests get the free permit until the large one waits
		l, err := a.TryAcquire(ctx)
		if errors.Is(err, distlock.ErrNotAcquired) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("a request of 3 permits waited 10s and single requests still got the free permit: it can be starved")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for _, l := range holders {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case l := <-got:
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the request of 3 permits never got in after the holders left")
	}
}

// At the driver level, requests that wait are served in the order they
// began: a later one that fits is refused while an earlier one waits, a
// withdrawn intent keeps nobody out, and a request without an intent waits
// behind every intent.
func (s *suite) weightedOrder(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	c := s.client(t)
	newSemaphore(t, c, name, 2) // the name's limit, for AcquirePermit
	w := c.Backend().(driver.WeightedPermits)
	sem := c.Backend().(driver.Semaphores)
	req := func(token, intent string, n int) driver.AcquireRequest {
		return driver.AcquireRequest{Key: name, Token: token + "-0123456789abcdef", TTL: time.Minute, Intent: intent, Permits: n}
	}
	try := func(what string, r driver.AcquireRequest, granted bool) {
		t.Helper()
		_, err := w.AcquirePermits(ctx, r, 2)
		switch {
		case granted && err != nil:
			t.Fatalf("%s: %v, want granted", what, err)
		case !granted && !errors.Is(err, distlock.ErrNotAcquired):
			t.Fatalf("%s: %v, want ErrNotAcquired", what, err)
		}
	}
	release := func(r driver.AcquireRequest) {
		t.Helper()
		if err := sem.ReleasePermit(ctx, name, r.Token); err != nil {
			t.Fatalf("release %s: %v", r.Token, err)
		}
	}
	holdA, holdB := req("hold-a", "", 1), req("hold-b", "", 1)
	try("a first permit", holdA, true)
	try("a second permit", holdB, true)
	big, small, gone := req("big", "intent-big", 2), req("small", "intent-small", 1), req("gone", "intent-gone", 1)
	try("a request of 2 while 2 are held", big, false)
	try("a request of 1 that will give up", gone, false)
	try("a request of 1 behind them", small, false)
	if err := w.WithdrawPermitIntent(ctx, name, gone.Intent); err != nil {
		t.Fatal(err)
	}
	release(holdA)
	try("the request of 1 while the request of 2 waits, a permit free", small, false)
	if _, err := sem.AcquirePermit(ctx, req("plain", "", 1), 2); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("AcquirePermit while requests wait, a permit free: %v, want ErrNotAcquired", err)
	}
	try("the request of 2 while 1 permit is free", big, false)
	release(holdB)
	try("the request of 1 before the request of 2 had its turn", small, false)
	try("the request of 2 with both permits free", big, true)
	try("the request of 1 beside the hold of 2", small, false)
	release(big)
	try("the request of 1 once the hold of 2 was released", small, true)
	release(small)
	try("a request without an intent once nobody waits", req("plain", "", 1), true)
}

// Holds of no permit or of more than the semaphore has are refused and
// take nothing.
func (s *suite) weightedBad(t *testing.T) {
	ctx := testContext(t, time.Minute)
	sem := newSemaphore(t, s.client(t), s.key(t), 3)
	for _, n := range []int{0, -1, 4} {
		if _, err := sem.TryAcquireN(ctx, n); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("TryAcquireN(%d) of 3 permits: %v, want ErrInvalidOption", n, err)
		}
		if _, err := sem.AcquireN(ctx, n, distlock.WithWait(time.Second)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("AcquireN(%d) of 3 permits: %v, want ErrInvalidOption", n, err)
		}
	}
	if info, err := sem.Inspect(ctx); err != nil || len(info.Held) != 0 {
		t.Errorf("Inspect after refused holds: %+v, %v; want none", info, err)
	}
}

// 12 goroutines over three clients take holds of 1 to 3 of 4 permits,
// waiting, and a quarter of them try single permits between: the permits
// held at once never pass 4.
func (s *suite) weightedContended(t *testing.T) {
	const limit, goroutines, rounds = 4, 12, 8
	ctx := testContext(t, 2*time.Minute)
	name := s.key(t)
	sems := []*distlock.Semaphore{
		newSemaphore(t, s.client(t), name, limit), newSemaphore(t, s.client(t), name, limit), newSemaphore(t, s.client(t), name, limit),
	}
	var held, most atomic.Int64
	errs := make(chan error, goroutines)
	for g := range goroutines {
		go func() {
			errs <- func() error {
				sem := sems[g%len(sems)]
				for r := range rounds {
					n := 1 + (g+r)%3
					take := func() (*distlock.Lock, error) { return sem.AcquireN(ctx, n, distlock.WithWait(time.Minute)) }
					if g%4 == 0 {
						n, take = 1, func() (*distlock.Lock, error) { return sem.TryAcquire(ctx) }
					}
					l, err := take()
					if errors.Is(err, distlock.ErrNotAcquired) && n == 1 {
						continue
					}
					if err != nil {
						return err
					}
					now := held.Add(int64(n))
					for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
					}
					time.Sleep(time.Duration(g%3) * time.Millisecond)
					held.Add(-int64(n))
					if err := l.Release(ctx); err != nil {
						return err
					}
					if now > limit {
						return fmt.Errorf("%d permits held at once, over %d", now, limit)
					}
				}
				return nil
			}()
		}()
	}
	for range goroutines {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if most.Load() < 2 {
		t.Errorf("at most %d permit held at once: holds do not share the semaphore", most.Load())
	}
}
