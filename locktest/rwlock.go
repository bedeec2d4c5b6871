package locktest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// rwlock runs the contract of driver.RWLocks, for backends that claim it;
// the others must say errors.ErrUnsupported.
func (s *suite) rwlock(t *testing.T) {
	s.capability(t, func(b driver.Backend) bool { _, ok := b.(driver.RWLocks); return ok },
		func(c *distlock.Client) error { _, err := c.RWMutex(s.key(t)); return err },
		[]subtest{
			{"ReadersShareWritersExclude", s.rwModes},
			{"WaitingWriterGoesBeforeLaterReaders", s.rwWriterFirst},
			{"IntentComesWithTheRequest", s.rwIntent},
			{"NeverWriterWithAnyone", s.rwContended},
			{"VanishedHoldersFreeIt", s.rwVanished},
		})
}

// newRWMutex returns a handle on name over c.
func newRWMutex(t *testing.T, c *distlock.Client, name string) *distlock.RWMutex {
	t.Helper()
	m, err := c.RWMutex(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// Readers on two clients hold at once; a writer is refused while they do
// and gets in once they left, with a fence above theirs; while it holds,
// readers and writers are refused.
func (s *suite) rwModes(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a, b := newRWMutex(t, s.client(t), name), newRWMutex(t, s.client(t), name)
	r1, err := a.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.TryRLock(ctx)
	if err != nil {
		t.Fatalf("a second reader on another client: %v; readers share", err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer while two readers hold: %v, want ErrNotAcquired", err)
	}
	if info, err := a.Inspect(ctx); err != nil || info.Writer || len(info.Held) != 2 || info.WritersWaiting != 0 {
		t.Fatalf("Inspect with two readers: %+v, %v", info, err)
	}
	for _, r := range []*distlock.Lock{r1, r2} {
		if err := r.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	w, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("a writer once the readers left: %v", err)
	}
	if w.Fence() <= max(r1.Fence(), r2.Fence()) {
		t.Errorf("the writer's fence %d is not above the readers' %d and %d", w.Fence(), r1.Fence(), r2.Fence())
	}
	if _, err := a.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a reader while a writer holds: %v, want ErrNotAcquired", err)
	}
	if _, err := a.TryLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a second writer: %v, want ErrNotAcquired", err)
	}
	if info, err := a.Inspect(ctx); err != nil || !info.Writer || len(info.Held) != 1 {
		t.Fatalf("Inspect with a writer: %+v, %v", info, err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r3, err := a.TryRLock(ctx)
	if err != nil {
		t.Fatalf("a reader after the writer left: %v", err)
	}
	if r3.Fence() <= w.Fence() {
		t.Errorf("a reader's fence %d after the writer's %d", r3.Fence(), w.Fence())
	}
	if err := r3.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A writer that waits behind a reader keeps readers that come after it out,
// gets in as soon as the reader leaves, and they get in after it; a writer
// that gave up waiting keeps nobody out, and neither does a refused TryLock.
func (s *suite) rwWriterFirst(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a, b := newRWMutex(t, s.client(t), name), newRWMutex(t, s.client(t), name)
	r, err := a.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer while a reader holds: %v, want ErrNotAcquired", err)
	}
	if l, err := a.TryRLock(ctx); err != nil {
		t.Fatalf("a reader after a refused TryLock: %v; only a waiting writer keeps readers out", err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	got := make(chan *distlock.Lock, 1)
	fail := make(chan error, 1)
	go func() {
		w, err := b.Lock(ctx, distlock.WithWait(30*time.Second))
		if err != nil {
			fail <- err
			return
		}
		got <- w
	}()
	deadline := time.Now().Add(10 * time.Second)
	for { // until the writer's intent is in the store
		info, err := a.Inspect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.WritersWaiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting writer's intent never showed in Inspect")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := a.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a reader arriving after a waiting writer: %v, want ErrNotAcquired", err)
	}
	later := make(chan *distlock.Lock, 1)
	go func() {
		l, err := a.RLock(ctx, distlock.WithWait(30*time.Second))
		if err != nil {
			fail <- err
			return
		}
		later <- l
	}()
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var w *distlock.Lock
	select {
	case w = <-got:
	case l := <-later:
		t.Fatalf("a reader that came after the waiting writer got in first (fence %d)", l.Fence())
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the writer never got in")
	}
	select {
	case l := <-later:
		t.Fatalf("a reader got in while the writer holds (fence %d)", l.Fence())
	case <-time.After(100 * time.Millisecond): // not synchronisation: a chance to break exclusion
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-later:
		if l.Fence() <= w.Fence() {
			t.Errorf("the later reader's fence %d is not above the writer's %d", l.Fence(), w.Fence())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the later reader never got in after the writer left")
	}

	// A writer that gives up its wait lets readers in at once.
	r, err = a.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, distlock.WithWait(200*time.Millisecond)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer's wait behind a reader: %v, want ErrNotAcquired", err)
	}
	if l, err := a.TryRLock(ctx); err != nil {
		t.Fatalf("a reader right after a writer gave up waiting: %v", err)
	} else if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// At the driver level, a refused exclusive attempt records the intent its
// request carries (driver.AcquireRequest.Intent) and none without one, and
// WithdrawIntent removes it.
func (s *suite) rwIntent(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	c := s.client(t)
	r, err := newRWMutex(t, c, name).TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Release(ctx) }()
	rw := c.Backend().(driver.RWLocks)
	intents := func(when string, want int) {
		t.Helper()
		if _, _, n, err := rw.InspectRW(ctx, name); err != nil || n != want {
			t.Fatalf("%s: %d intents, %v; want %d", when, n, err, want)
		}
	}
	req := driver.AcquireRequest{Key: name, Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
	if _, err := rw.AcquireRW(ctx, req, driver.Exclusive); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer while a reader holds: %v, want ErrNotAcquired", err)
	}
	intents("after a refused attempt without an intent", 0)
	req.Intent = "locktest-intent"
	if _, err := rw.AcquireRW(ctx, req, driver.Exclusive); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer with an intent while a reader holds: %v, want ErrNotAcquired", err)
	}
	intents("after a refused attempt with an intent", 1)
	if err := rw.WithdrawIntent(ctx, name, req.Intent); err != nil {
		t.Fatal(err)
	}
	intents("after WithdrawIntent", 0)
}

// 12 goroutines over two clients, one in three a writer, take turns: a
// writer is never inside with anyone, readers do overlap, and every
// writer gets in (no starvation).
func (s *suite) rwContended(t *testing.T) {
	const goroutines = 12
	ctx := testContext(t, 3*time.Minute)
	name := s.key(t)
	ms := []*distlock.RWMutex{newRWMutex(t, s.client(t), name), newRWMutex(t, s.client(t), name)}
	rounds := max(s.h.Iterations/10, 10)
	var (
		readers, writers, mostReaders atomic.Int32
		broken                        atomic.Bool
		wg                            sync.WaitGroup
		errs                          = make(chan error, goroutines)
	)
	for g := range goroutines {
		writer := g%3 == 0
		wg.Go(func() {
			m := ms[g%2]
			for range rounds {
				take := m.RLock
				if writer {
					take = m.Lock
				}
				l, err := take(ctx, distlock.WithWait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				if writer {
					if writers.Add(1) != 1 || readers.Load() != 0 {
						broken.Store(true)
					}
				} else {
					n := readers.Add(1)
					if writers.Load() != 0 {
						broken.Store(true)
					}
					for most := mostReaders.Load(); n > most && !mostReaders.CompareAndSwap(most, n); most = mostReaders.Load() {
					}
				}
				time.Sleep(time.Millisecond)
				if writer {
					writers.Add(-1)
				} else {
					readers.Add(-1)
				}
				if err := l.Release(ctx); err != nil {
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
	if broken.Load() {
		t.Fatal("a writer was inside with another holder")
	}
	if mostReaders.Load() < 2 {
		t.Errorf("at most %d reader at once among %d: readers do not share", mostReaders.Load(), goroutines*2/3)
	}
}

// Holders that vanish (no release, no renewal) free the lock at their
// lease, readers and writer alike.
func (s *suite) rwVanished(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	gone, other := newRWMutex(t, s.client(t), name), newRWMutex(t, s.client(t), name)
	// Waits, though the lock is free: a first attempt may miss a short
	// lease's reply budget on a busy machine.
	short := []distlock.Option{distlock.WithLease(500 * time.Millisecond), distlock.WithWait(10 * time.Second)}
	for _, take := range []func() (*distlock.Lock, error){
		func() (*distlock.Lock, error) { return gone.RLock(ctx, short...) },
		func() (*distlock.Lock, error) { return gone.Lock(ctx, short...) },
	} {
		l, err := take()
		if err != nil {
			t.Fatal(err)
		}
		w, err := other.Lock(ctx, distlock.WithWait(30*time.Second))
		if err != nil {
			t.Fatalf("a vanished holder never freed the lock: %v", err)
		}
		if w.Fence() <= l.Fence() {
			t.Errorf("fence %d after %d: not increasing", w.Fence(), l.Fence())
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
