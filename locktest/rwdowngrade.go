package locktest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// rwDowngrade runs the contract of driver.RWDowngrader, for backends that
// claim it; the others must say errors.ErrUnsupported.
func (s *suite) rwDowngrade(t *testing.T) {
	s.capability(t, func(b driver.Backend) bool { _, ok := b.(driver.RWDowngrader); return ok },
		func(c *distlock.Client) error {
			m, err := c.RWMutex(s.key(t))
			if err != nil {
				return err
			}
			defer m.Close()
			return m.DowngradeToken(testContext(t, time.Minute), "locktest-token-not-held-0001")
		},
		[]subtest{
			{"ReadersJoinTheDowngradedWriter", s.rwDowngradeReaders},
			{"NoWriterInBetween", s.rwDowngradeNoWriter},
			{"OnlyALiveHold", s.rwDowngradeOnlyHeld},
			{"WakesWatchers", s.rwDowngradeWakes},
		})
}

// A writer that downgrades keeps its hold, fence and lease as a reader:
// readers on other clients join it, a writer is refused until every hold
// ended, and the downgraded hold renews and releases as before.
func (s *suite) rwDowngradeReaders(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a, b := newRWMutex(t, s.client(t), name), newRWMutex(t, s.client(t), name)
	w, err := a.Lock(ctx, distlock.WithLease(2*time.Second), distlock.WithWatchdog(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a reader before the downgrade: %v, want ErrNotAcquired", err)
	}
	waiting := make(chan error, 1)
	go func() { // a reader that waits from before the downgrade gets in with it
		l, err := b.RLock(ctx, distlock.WithWait(30*time.Second))
		if err == nil {
			err = l.Release(ctx)
		}
		waiting <- err
	}()
	time.Sleep(200 * time.Millisecond) // not synchronisation: a chance for the reader to wait
	if err := a.Downgrade(ctx, w); err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	if err := <-waiting; err != nil {
		t.Fatalf("a reader waiting at the downgrade: %v, want it let in", err)
	}
	if err := a.Downgrade(ctx, w); err != nil {
		t.Fatalf("a second Downgrade of the same hold: %v, want nil (a read hold stays one)", err)
	}
	r, err := b.TryRLock(ctx)
	if err != nil {
		t.Fatalf("a reader after the downgrade: %v", err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer beside the downgraded hold and a reader: %v, want ErrNotAcquired", err)
	}
	info, err := a.Inspect(ctx)
	if err != nil || info.Writer || len(info.Held) != 2 {
		t.Fatalf("Inspect after the downgrade: %+v, %v; want two readers", info, err)
	}
	if !slices.ContainsFunc(info.Held, func(i distlock.Info) bool { return i.Fence == w.Fence() }) {
		t.Errorf("no hold has the writer's fence %d after the downgrade: %+v", w.Fence(), info.Held)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Past its 2s lease, renewed by the watchdog: the hold is still a Lock.
	time.Sleep(2500 * time.Millisecond)
	if err := w.Err(); err != nil {
		t.Fatalf("the downgraded hold after its lease: %v, want still held", err)
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a writer while the downgraded hold lives: %v, want ErrNotAcquired", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	w2, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("a writer once every hold ended: %v", err)
	}
	if w2.Fence() <= r.Fence() {
		t.Errorf("the next writer's fence %d is not above the reader's %d", w2.Fence(), r.Fence())
	}
	if err := w2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// A writer waiting when the holder downgrades does not get in until the
// downgraded hold ends, and its intent still keeps new readers out.
func (s *suite) rwDowngradeNoWriter(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a, b := newRWMutex(t, s.client(t), name), newRWMutex(t, s.client(t), name)
	w, err := a.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lock, 1)
	fail := make(chan error, 1)
	go func() {
		l, err := b.Lock(ctx, distlock.WithWait(30*time.Second))
		if err != nil {
			fail <- err
			return
		}
		got <- l
	}()
	eventuallyWriterWaits(t, a)
	if err := a.Downgrade(ctx, w); err != nil {
		t.Fatalf("Downgrade: %v", err)
	}
	select {
	case l := <-got:
		t.Fatalf("the waiting writer got in beside the downgraded hold (fence %d)", l.Fence())
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(500 * time.Millisecond): // not synchronisation: a chance to break exclusion
	}
	if _, err := a.TryRLock(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a new reader while a writer waits: %v, want ErrNotAcquired", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l.Fence() <= w.Fence() {
			t.Errorf("the writer's fence %d is not above the downgraded hold's %d", l.Fence(), w.Fence())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case err := <-fail:
		t.Fatal(err)
	case <-time.After(30 * time.Second):
		t.Fatal("the writer never got in after the downgraded hold ended")
	}
}

// eventuallyWriterWaits waits until m shows a waiting writer's intent.
func eventuallyWriterWaits(t *testing.T, m *distlock.RWMutex) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := m.Inspect(testContext(t, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if info.WritersWaiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting writer's intent never showed in Inspect")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A released hold, a token that never held, and a hold of another name are
// refused and change nothing; a reader's hold downgrades to itself.
func (s *suite) rwDowngradeOnlyHeld(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	c := s.client(t)
	m := newRWMutex(t, c, name)
	w, err := m.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Downgrade(ctx, w); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("Downgrade of a released hold: %v, want ErrNotHeld", err)
	}
	if err := m.DowngradeToken(ctx, "locktest-token-never-held-01"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("DowngradeToken of a token that never held: %v, want ErrNotHeld", err)
	}
	if info, err := m.Inspect(ctx); err != nil || len(info.Held) != 0 {
		t.Errorf("Inspect after refused downgrades: %+v, %v; want free", info, err)
	}
	other := newRWMutex(t, c, s.key(t))
	ow, err := other.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Downgrade(ctx, ow); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("Downgrade of another name's hold: %v, want ErrInvalidOption", err)
	}
	if info, err := other.Inspect(ctx); err != nil || !info.Writer {
		t.Errorf("the other name after a refused downgrade: %+v, %v; want its writer", info, err)
	}
	if err := ow.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := m.TryRLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Downgrade(ctx, r); err != nil {
		t.Errorf("Downgrade of a read hold: %v, want nil", err)
	}
	if info, err := m.Inspect(ctx); err != nil || info.Writer || len(info.Held) != 1 || info.Held[0].Fence != r.Fence() {
		t.Errorf("Inspect after a reader's downgrade: %+v, %v; want its read hold unchanged", info, err)
	}
	if err := r.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// At the driver level, a downgrade wakes the name's watchers on another
// backend: the readers it kept out may join. (A watch may also fire when
// nothing changed; waiters check again.)
func (s *suite) rwDowngradeWakes(t *testing.T) {
	ctx := testContext(t, time.Minute)
	name := s.key(t)
	a, b := s.client(t).Backend(), s.client(t).Backend()
	rw := a.(driver.RWLocks)
	const token = "locktest-downgrade-wake-0001"
	if _, err := rw.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: token, TTL: 10 * time.Second}, driver.Exclusive); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rw.ReleaseRW(ctx, name, token) }()
	wake, stop, err := b.(driver.RWLocks).WatchRW(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	time.Sleep(300 * time.Millisecond) // a wake of the watch's start, if any, comes meanwhile
	select {
	case <-wake:
	default:
	}
	if err := a.(driver.RWDowngrader).DowngradeRW(ctx, name, token); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake-up within 5s of the downgrade")
	}
}
