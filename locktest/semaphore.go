package locktest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// semaphore runs the contract of driver.Semaphores, for backends that
// claim it; the others must say errors.ErrUnsupported.
func (s *suite) semaphore(t *testing.T) {
	s.capability(t, func(b driver.Backend) bool { _, ok := b.(driver.Semaphores); return ok },
		func(c *distlock.Client) error { _, err := c.Semaphore(s.key(t), 2); return err },
		[]subtest{
			{"AtMostNHolders", s.semAtMostN},
			{"VanishedHolderFreesPermit", s.semVanished},
			{"WokenOnRelease", s.semWoken},
			{"PermitsChangeExplicitly", s.semPermits},
		})
}

// newSemaphore returns a handle on name with n permits over c.
func newSemaphore(t *testing.T, c *distlock.Client, name string, n int) *distlock.Semaphore {
	t.Helper()
	sem, err := c.Semaphore(name, n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sem.Close() })
	return sem
}

// 16 goroutines over two clients contend for 3 permits: never more than 3
// inside at once, every permit's fence above those granted before it on
// the same client, and all 3 used.
func (s *suite) semAtMostN(t *testing.T) {
	const permits, goroutines = 3, 16
	ctx := testContext(t, 3*time.Minute)
	name := s.key(t)
	sems := []*distlock.Semaphore{newSemaphore(t, s.client(t), name, permits), newSemaphore(t, s.client(t), name, permits)}
	rounds := max(s.h.Iterations/8, 10)
	var (
		inside, most atomic.Int32
		wg           sync.WaitGroup
		errs         = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Go(func() {
			for range rounds {
				p, err := sems[g%2].Acquire(ctx, distlock.WithWait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := p.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := most.Load(); m > permits {
		t.Fatalf("%d holders at once, want at most %d", m, permits)
	} else if m < 2 {
		t.Errorf("at most %d holder at once among %d goroutines: the permits are not shared", m, goroutines)
	}
}

// A holder that vanishes (no release, no renewal) gives its permit back at
// its lease.
func (s *suite) semVanished(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	gone := newSemaphore(t, s.client(t), name, 1)
	other := newSemaphore(t, s.client(t), name, 1)
	const lease = 500 * time.Millisecond
	granted := time.Now()
	p, err := gone.TryAcquire(ctx, distlock.WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	q, err := other.TryAcquire(ctx)
	returned := time.Now()
	if err == nil {
		_ = q.Release(ctx)
		// On a loaded machine the try can reach the store after the lease
		// ran out: only a grant returned within the lease is a failure.
		if returned.Before(granted.Add(lease - drift(lease))) {
			t.Fatalf("second permit of one granted %v into the first one's lease of %v", returned.Sub(granted), lease)
		}
	} else if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("second permit of one: %v, want ErrNotAcquired", err)
	}
	start := time.Now()
	p2, err := other.Acquire(ctx, distlock.WithWait(30*time.Second))
	if err != nil {
		t.Fatalf("the vanished holder's permit never came back: %v", err)
	}
	t.Logf("permit back %v after the wait began", time.Since(start).Round(time.Millisecond))
	if p2.Fence() <= p.Fence() {
		t.Errorf("fence %d after %d: not increasing", p2.Fence(), p.Fence())
	}
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A waiter on another client is woken by the store when a permit is
// released, not by a poll interval.
func (s *suite) semWoken(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a := newSemaphore(t, s.client(t), name, 1)
	b := newSemaphore(t, s.client(t), name, 1)
	var wakes, releases []time.Duration
	for range 5 {
		p, err := a.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		type result struct {
			l   *distlock.Lock
			at  time.Time
			err error
		}
		got := make(chan result, 1)
		go func() {
			l, err := b.Acquire(ctx, distlock.WithWait(10*time.Second))
			got <- result{l, time.Now(), err}
		}()
		// Not synchronisation: the waiter waits; give any poll time to back
		// off, so that only a notice from the store wakes it in time.
		time.Sleep(250 * time.Millisecond)
		released := time.Now()
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
		releases = append(releases, time.Since(released))
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		wakes = append(wakes, r.at.Sub(released))
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.checkWakes(t, "wake after a permit's release", wakes, releases)
}

// Bad numbers are refused; a name keeps its number until SetPermits
// changes it, and a handle that expects another number is told so.
func (s *suite) semPermits(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := s.client(t)
	name := s.key(t)
	for _, n := range []int{0, -1} {
		if _, err := c.Semaphore(name, n); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("Semaphore with %d permits: %v, want ErrInvalidOption", n, err)
		}
	}
	if _, err := c.Semaphore("", 1); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Errorf("Semaphore with no name: %v, want ErrInvalidKey", err)
	}
	three := newSemaphore(t, c, name, 3)
	p, err := three.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	five := newSemaphore(t, s.client(t), name, 5)
	_, err = five.TryAcquire(ctx)
	if !errors.Is(err, distlock.ErrInvalidOption) || !strings.Contains(err.Error(), "3") || !strings.Contains(err.Error(), "5") {
		t.Fatalf("a handle expecting 5 permits of a semaphore of 3: %v, want ErrInvalidOption naming both", err)
	}
	if err := five.SetPermits(ctx, 0); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("SetPermits(0): %v, want ErrInvalidOption", err)
	}
	if err := five.SetPermits(ctx, 5); err != nil {
		t.Fatal(err)
	}
	info, err := five.Inspect(ctx)
	if err != nil || info.Permits != 5 || len(info.Held) != 1 || info.Held[0].Fence != p.Fence() {
		t.Fatalf("Inspect: %+v, %v; want 5 permits and the one held (fence %d)", info, err, p.Fence())
	}
	var held []*distlock.Lock
	for i := range 4 {
		q, err := five.TryAcquire(ctx)
		if err != nil {
			t.Fatalf("permit %d of 5: %v", i+2, err)
		}
		held = append(held, q)
	}
	if _, err := five.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("a sixth permit of 5: %v, want ErrNotAcquired", err)
	}
	if _, err := three.TryAcquire(ctx); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("the handle of 3 after SetPermits(5) elsewhere: %v, want ErrInvalidOption", err)
	}
	for _, q := range append(held, p) {
		if err := q.Release(ctx); err != nil {
			t.Error(fmt.Errorf("release: %w", err))
		}
	}
}
