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
// after its next renewal: at once where the store tells holders, at that
// renewal at the latest.
const requestTold = 2 * time.Second

// waitAsked waits for l to be told of a request to release it, which its
// next renewal (made here) tells at the latest.
func waitAsked(t *testing.T, ctx context.Context, l *distlock.Lock) {
	t.Helper()
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew after the request: %v", err)
	}
	select {
	case <-l.ReleaseRequested():
	case <-time.After(requestTold):
		t.Fatalf("the holder was not told of the request within %v of its renewal", requestTold)
	}
}

// releaseRequest checks the optional driver.ReleaseRequester: the holder
// of a key is told, with the reason, by its next renewal at the latest,
// and keeps its lock; a request for a free key fails with ErrNotHeld and
// tells nobody; a later holder of the key, and the holder of another key,
// are not asked.
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

	info, err := asker.RequestRelease(ctx, key, "deploy at 02:00\nticket OPS-7") // a reason may hold a newline
	if err != nil {
		t.Fatalf("request release: %v", err)
	}
	if !info.Held || info.Fence != l.Fence() || info.Meta.Owner != "nightly-job" {
		t.Fatalf("request release reported %+v, want the hold (fence %d, owner nightly-job)", info, l.Fence())
	}
	waitAsked(t, ctx, l)
	if got := l.ReleaseReason(); got != "deploy at 02:00\nticket OPS-7" {
		t.Fatalf("ReleaseReason = %q, want the requester's", got)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("a request ended the lock: %v", err)
	}
	if err := bystander.Renew(ctx); err != nil {
		t.Fatalf("renew another key: %v", err)
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
	waitAsked(t, ctx, first)
	if err := first.Release(ctx); err != nil {
		t.Fatalf("release after the request: %v", err)
	}
	next := mustLock(t, ctx, b, key, distlock.WithWait(5*time.Second))
	defer func() { _ = next.Release(ctx) }()
	if err := next.Renew(ctx); err != nil {
		t.Fatalf("renew by the next holder: %v", err)
	}
	quiet, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	select {
	case <-next.ReleaseRequested():
		t.Fatalf("the next holder was asked by a request made before its grant (%q)", next.ReleaseReason())
	case <-quiet.Done():
	}
}
