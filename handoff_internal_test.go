package distlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
)

// oneKey is a minimal store of one key with Handoff, enough to test the
// client's side of a handoff.
type oneKey struct {
	driver.Backend
	holder  chan string // the token holding the key, "" if free; a 1-slot mutex
	fence   uint64
	release chan string // tokens released
}

func newOneKey() *oneKey {
	s := &oneKey{holder: make(chan string, 1), release: make(chan string, 8)}
	s.holder <- ""
	return s
}

func (s *oneKey) Acquire(_ context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	h := <-s.holder
	if h != "" {
		s.holder <- h
		return driver.Grant{}, ErrNotAcquired
	}
	s.fence++
	s.holder <- r.Token
	return driver.Grant{Fence: s.fence}, nil
}

func (s *oneKey) Handoff(_ context.Context, _, token string, next driver.AcquireRequest) (driver.Grant, error) {
	h := <-s.holder
	if h != token {
		s.holder <- h
		return driver.Grant{}, ErrNotHeld
	}
	s.fence++
	s.holder <- next.Token
	return driver.Grant{Fence: s.fence}, nil
}

func (s *oneKey) Release(_ context.Context, _, token string) error {
	h := <-s.holder
	if h != token {
		s.holder <- h
		return ErrNotHeld
	}
	s.holder <- ""
	s.release <- token
	return nil
}

func (s *oneKey) Close() error { return nil }

func TestHandedGrantReleasedWhenWaiterLeft(t *testing.T) {
	ctx := context.Background()
	store := newOneKey()
	c := New(store)
	defer c.Close()
	if _, err := store.Acquire(ctx, driver.AcquireRequest{Key: "k", Token: "holder", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	// A turn that is no longer in the line: its waiter gave up.
	gone := &turn{req: driver.AcquireRequest{Key: "k", TTL: time.Second}, handed: make(chan handed, 1), wake: make(chan struct{}, 1)}
	done, err := c.handOff(ctx, store, &Request{Key: "k"}, "holder", gone)
	if !done || err != nil {
		t.Fatalf("handOff = %v, %v; want done", done, err)
	}
	select {
	case tok := <-store.release:
		if tok == "holder" {
			t.Fatal("released the old holder's token instead of the handed one")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the grant handed to a waiter that left was not released")
	}
	if len(gone.handed) != 0 {
		t.Fatal("a grant was given to a turn outside the line")
	}
}

// heldWithWaiter has "holder" take "k" in store, and a client over store
// with a waiter in its line for "k"; the test ends both.
func heldWithWaiter(t *testing.T, store driver.Backend) (*Client, *turn) {
	t.Helper()
	c := New(store)
	t.Cleanup(func() { _ = c.Close() })
	if _, err := store.Acquire(context.Background(), driver.AcquireRequest{Key: "k", Token: "holder", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	waiter := c.lines.join(driver.AcquireRequest{Key: "k", TTL: time.Second}, false)
	t.Cleanup(func() { c.lines.leave("k", waiter, false) })
	return c, waiter
}

func TestHandoffByStaleTokenChangesNothing(t *testing.T) {
	ctx := context.Background()
	store := newOneKey()
	c, waiter := heldWithWaiter(t, store)
	done, err := c.handOff(ctx, store, &Request{Key: "k"}, "stale", waiter)
	if !done || !errors.Is(err, ErrNotHeld) {
		t.Fatalf("handOff = %v, %v; want done with ErrNotHeld", done, err)
	}
	if h := <-store.holder; h != "holder" {
		t.Fatalf("key held by %q after a stale handoff", h)
	}
	if _, ok := waiter.takeHanded(); ok {
		t.Fatal("the waiter was handed a grant that does not exist")
	}
}

// lostHandoff hands the key over in the store, then loses the reply.
type lostHandoff struct{ *oneKey }

func (s lostHandoff) Handoff(ctx context.Context, key, token string, next driver.AcquireRequest) (driver.Grant, error) {
	if _, err := s.oneKey.Handoff(ctx, key, token, next); err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{}, errors.New("i/o timeout")
}

// A release whose handoff happened in the store but lost its reply finds
// the key gone from its token: its ErrNotHeld says that the failed handoff
// may have freed it, which Lock.Release, within the lease, takes for done.
func TestReleaseAfterLostHandoff(t *testing.T) {
	store := lostHandoff{newOneKey()}
	c, waiter := heldWithWaiter(t, store)
	<-waiter.head
	err := c.releaseOrHand(context.Background(), &Request{Key: "k"}, "holder")
	if !errors.Is(err, ErrNotHeld) || !errors.Is(err, errMayHaveReleased) {
		t.Fatalf("release after a lost handoff: %v; want ErrNotHeld saying the handoff may have released it", err)
	}
}
