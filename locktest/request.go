package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// requestTold bounds how long a holder takes to learn of a release request
// through its store's notices.
const requestTold = 2 * time.Second

// releaseRequest checks the optional driver.ReleaseRequester: the holder
// of a key is told, with the reason, and keeps its lock; a request for a
// free key fails with ErrNotHeld and tells nobody; a later holder of the
// key, and the holder of another key, are not asked.
func (s *suite) releaseRequest(t *testing.T) {
	s.capability(t, func(b driver.Backend) bool { _, ok := b.(driver.ReleaseRequester); return ok },
		func(c *distlock.Client) error {
			_, err := c.RequestRelease(testContext(t, time.Minute), s.key(t), "maintenance")
			return err
		},
		[]subtest{{"HolderIsTold", s.requestTellsHolder}, {"OnlyThatGrant", s.requestOnlyThatGrant}})
}

func (s *suite) requestTellsHolder(t *testing.T) {
	ctx := testContext(t, time.Minute)
	holder, other, asker := s.client(t), s.client(t), s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, holder, key, distlock.WithOwner("nightly-job"))
	defer func() { _ = l.Release(ctx) }()
	bystander := mustLock(t, ctx, holder, key+"/other")
	defer func() { _ = bystander.Release(ctx) }()

	info, err := asker.RequestRelease(ctx, key, "deploy at 02:00")
	if err != nil {
		t.Fatalf("request release: %v", err)
	}
	if !info.Held || info.Fence != l.Fence() || info.Meta.Owner != "nightly-job" {
		t.Fatalf("request release reported %+v, want the hold (fence %d, owner nightly-job)", info, l.Fence())
	}
	select {
	case <-l.ReleaseRequested():
	case <-time.After(requestTold):
		t.Fatalf("the holder was not told of the request within %v", requestTold)
	}
	if got := l.ReleaseReason(); got != "deploy at 02:00" {
		t.Fatalf("ReleaseReason = %q, want the requester's", got)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("a request ended the lock: %v", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew after a request: %v", err)
	}
	wantNotAcquired(t, ctx, other, key)
	select {
	case <-bystander.ReleaseRequested():
		t.Fatal("the holder of another key was asked too")
	default:
	}
	if _, err := asker.RequestRelease(ctx, key+"/free", "nothing there"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("request release of a free key: got %v, want ErrNotHeld", err)
	}
}

// requestOnlyThatGrant: a request reaches the grant that held the key when
// it was made; the next holder is not asked by it.
func (s *suite) requestOnlyThatGrant(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b, asker := s.client(t), s.client(t), s.client(t)
	key := s.key(t)
	first := mustLock(t, ctx, a, key)
	if _, err := asker.RequestRelease(ctx, key, "give way"); err != nil {
		t.Fatalf("request release: %v", err)
	}
	select {
	case <-first.ReleaseRequested():
	case <-time.After(requestTold):
		t.Fatalf("the holder was not told of the request within %v", requestTold)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("release after the request: %v", err)
	}
	next := mustLock(t, ctx, b, key, distlock.WithWait(5*time.Second))
	defer func() { _ = next.Release(ctx) }()
	quiet, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	select {
	case <-next.ReleaseRequested():
		t.Fatalf("the next holder was asked by a request made before its grant (%q)", next.ReleaseReason())
	case <-quiet.Done():
	}
}
