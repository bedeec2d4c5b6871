package distlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
)

// lostSetReply takes a set of keys and loses the reply.
type lostSetReply struct{ *memlock.Backend }

func (b lostSetReply) AcquireAll(ctx context.Context, reqs []driver.AcquireRequest) ([]driver.Grant, error) {
	if _, err := b.Backend.AcquireAll(ctx, reqs); err != nil {
		return nil, err
	}
	return nil, errTransient
}

// A set the store took but whose reply was lost fails LockAll with the
// store's error, and every key of it is released in the background.
func TestLockAllLostReplyReleasesTheSet(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	c := distlock.New(lostSetReply{store.Connect()})
	keys := []string{"set/a", "set/b", "set/c"}
	if _, err := c.LockAll(ctx, keys, distlock.WithWait(0)); !errors.Is(err, errTransient) {
		t.Fatalf("LockAll with the reply lost: %v, want the store's error", err)
	}
	if err := c.Close(); err != nil { // waits for the background releases
		t.Fatal(err)
	}
	other := distlock.New(store)
	defer other.Close()
	for _, k := range keys {
		l, err := other.TryLock(ctx, k)
		if err != nil {
			t.Fatalf("%q of a set whose reply was lost was not released: %v", k, err)
		}
		_ = l.Release(ctx)
	}
}

// A reentrant LockAll joins the hold its owner has of a key of the set
// and takes the others; releasing the set leaves the owner's hold.
func TestLockAllReentrantJoinsTheOwnersHold(t *testing.T) {
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	opts := []distlock.Option{distlock.WithOwner("job-7"), distlock.Reentrant(), distlock.WithWait(0)}
	held, err := c.Lock(ctx, "set/a", opts...)
	if err != nil {
		t.Fatal(err)
	}
	set, err := c.LockAll(ctx, []string{"set/b", "set/a", "set/c"}, opts...)
	if err != nil {
		t.Fatalf("LockAll by the owner of one of its keys: %v", err)
	}
	if f, _ := set.Fence("set/a"); f != held.Fence() {
		t.Errorf("the set's lock of set/a has fence %d, want the owner's hold's %d", f, held.Fence())
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := held.Err(); err != nil {
		t.Errorf("the owner's hold ended with the set's release: %v", err)
	}
	_ = held.Release(ctx)
}
