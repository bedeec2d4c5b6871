package distlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
)

// freeStore grants every request, with Grant.Lost as given: enough to test
// how the client registers and ends a hold.
type freeStore struct {
	driver.Backend // nil: only the methods below are called
	lost           context.Context
	mu             sync.Mutex
	released       []string
}

func (s *freeStore) Acquire(context.Context, driver.AcquireRequest) (driver.Grant, error) {
	return driver.Grant{Fence: 1, Lost: s.lost}, nil
}

func (s *freeStore) Renew(context.Context, string, string, time.Duration) error { return nil }

func (s *freeStore) Release(_ context.Context, _, token string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released = append(s.released, token)
	return nil
}

func (s *freeStore) Close() error { return nil }

// kindLog records event kinds in order.
type kindLog struct {
	mu    sync.Mutex
	kinds []observe.Kind
	lost  chan struct{}
}

func (k *kindLog) AcquireStarted(ctx context.Context, _ observe.Event) context.Context { return ctx }

func (k *kindLog) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.StoreCall {
		return
	}
	k.mu.Lock()
	k.kinds = append(k.kinds, e.Kind)
	k.mu.Unlock()
	if e.Kind == observe.Lost {
		close(k.lost)
	}
}

func TestHoldLostAtGrantIsRegisteredFirst(t *testing.T) {
	lost, lose := context.WithCancel(context.Background())
	lose() // the session ended before the grant was even handled
	log := &kindLog{lost: make(chan struct{})}
	c := New(&freeStore{lost: lost}, WithObserver(log))
	defer c.Close()
	l, err := c.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-log.lost:
	case <-time.After(5 * time.Second):
		t.Fatal("no loss reported for a grant whose Lost was done")
	}
	<-l.Done()
	log.mu.Lock()
	kinds := append([]observe.Kind(nil), log.kinds...)
	log.mu.Unlock()
	if len(kinds) < 2 || kinds[0] != observe.Acquired || kinds[1] != observe.Lost {
		t.Fatalf("events %v, want acquired, then lost", kinds)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.holds) != 0 || len(c.reentrant) != 0 {
		t.Fatalf("a hold lost at its grant stays registered: %d holds", len(c.holds))
	}
}

func TestErrChecksTheDeadlineItself(t *testing.T) {
	c := New(&freeStore{})
	defer c.Close()
	l, err := c.TryLock(context.Background(), "k", WithLease(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A pause: the deadline passed, and the client's timer has not run yet.
	l.h.mu.Lock()
	l.h.deadline = time.Now().Add(-time.Millisecond)
	l.h.mu.Unlock()
	if err := l.Err(); !errors.Is(err, ErrLockLost) {
		t.Fatalf("Err right after the deadline = %v, want ErrLockLost", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Err saw the loss but Done is still open")
	}
}

func TestFirstLossReasonStays(t *testing.T) {
	store := &freeStore{}
	c := New(store)
	l, err := c.TryLock(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	l.h.markLost(observe.LossMaxHold)
	l.h.markLost(observe.LossStoreDeleted) // a late signal from the backend
	if !strings.Contains(l.Err().Error(), observe.LossMaxHold) {
		t.Fatalf("Err = %v, want the first reason, %s", l.Err(), observe.LossMaxHold)
	}
	_ = l.Release(context.Background())
	_ = c.Close()
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.released) != 1 || store.released[0] != l.Token() {
		t.Fatalf("released tokens %v: a lock capped by MaxHold must be freed by token", store.released)
	}
}

func (s *freeStore) Inspect(_ context.Context, key string) (driver.Info, error) {
	return driver.Info{Key: key}, nil // free: the hold it granted is gone
}
