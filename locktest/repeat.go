package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
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
		// The store's expiry runs on its clock, the check on this process's
		// monotonic one: say how far the wall clock moved against it, which
		// would explain a shortfall of that size.
		moved := w.at.Round(0).Sub(first.Sent.Round(0)) - w.at.Sub(first.Sent)
		repeat := "refused"
		if again.Fence != 0 {
			repeat = fmt.Sprintf("sent at %v", again.Sent.Sub(first.Sent))
		}
		t.Errorf("a waiter got the key %v before %s ended (first grant sent at 0, fence %d; repeat %s; waiter granted by %v, fence %d; the wall clock moved %v against the monotonic one)",
			valid.Sub(w.at), what, first.Fence, repeat, w.at.Sub(first.Sent), w.l.Fence(), moved)
	}
	if w.l.Fence() <= first.Fence {
		t.Errorf("the waiter's fence %d is not above the repeated grant's %d", w.l.Fence(), first.Fence)
	}
}

// tokensOfEveryLength: AcquireToken takes a token of any length from
// distlock.MinTokenLen to distlock.MaxTokenLen, of letters, digits, '-'
// and '_', and the store keeps it whole: the holder renews and releases
// with it, and no other token of the same start does.
func (s *suite) tokensOfEveryLength(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := s.client(t)
	for _, n := range []int{distlock.MinTokenLen, 33, 65, distlock.MaxTokenLen} {
		key := s.key(t)
		token := strings.Repeat("T-k_", distlock.MaxTokenLen)[:n-1] + "z"
		if _, err := c.AcquireToken(ctx, key, token, distlock.WithLease(time.Minute)); err != nil {
			t.Fatalf("AcquireToken with a token of %d bytes: %v", n, err)
		}
		if err := c.RenewToken(ctx, key, token[:n-1]+"x", time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
			t.Errorf("RenewToken with another token of %d bytes, same but the last byte: %v, want ErrNotHeld", n, err)
		}
		if err := c.RenewToken(ctx, key, token, time.Minute); err != nil {
			t.Errorf("RenewToken with the token of %d bytes: %v", n, err)
		}
		if err := c.ReleaseToken(ctx, key, token); err != nil {
			t.Errorf("ReleaseToken with the token of %d bytes: %v", n, err)
		}
		if info, err := c.Inspect(ctx, key); err != nil || info.Held {
			t.Errorf("after the release of a token of %d bytes: %+v, %v", n, info, err)
		}
	}
}

// oneTokenOnTwoKeys holds two keys under one token, as a careless caller
// may: each is its own hold, which a release of the other leaves alone,
// and a client holding both closes promptly.
func (s *suite) oneTokenOnTwoKeys(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := distlock.New(s.h.NewBackend(t))
	a, b := s.key(t), s.key(t)+"-b"
	token := strings.Repeat("0123456789abcdef", 2)
	for _, k := range []string{a, b} {
		if _, err := c.AcquireToken(ctx, k, token, distlock.WithLease(time.Minute)); err != nil {
			t.Fatalf("AcquireToken %q: %v", k, err)
		}
	}
	time.Sleep(300 * time.Millisecond) // past any delay before a backend watches its holds
	if err := c.ReleaseToken(ctx, b, token); err != nil {
		t.Fatalf("ReleaseToken %q: %v", b, err)
	}
	if err := c.RenewToken(ctx, a, token, time.Minute); err != nil {
		t.Errorf("RenewToken of %q after the release of %q under the same token: %v", a, b, err)
	}
	if info, err := c.Inspect(ctx, a); err != nil || !info.Held {
		t.Errorf("%q after the release of %q under the same token: %+v, %v; want held", a, b, info, err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a client holding two keys under one token hangs")
	}
	cleanup := distlock.New(s.h.NewBackend(t))
	defer cleanup.Close()
	_ = cleanup.ReleaseToken(ctx, a, token)
}

// forcedOneOfTwoKeys holds two keys under one token through the backend
// itself, as a caller of the driver may, and force-releases one: the
// other's Grant.Lost must not end, since its hold goes on. Backends
// without driver.ForceReleaser skip it.
func (s *suite) forcedOneOfTwoKeys(t *testing.T) {
	ctx := testContext(t, time.Minute)
	b := s.h.NewBackend(t)
	defer b.Close()
	fr, ok := s.h.NewBackend(t).(driver.ForceReleaser)
	if !ok {
		t.Skip("the backend does not implement driver.ForceReleaser")
	}
	defer fr.(driver.Backend).Close()
	a, other := s.key(t), s.key(t)+"-b"
	token := strings.Repeat("fedcba9876543210", 2)
	ga, err := b.Acquire(ctx, driver.AcquireRequest{Key: a, Token: token, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.Acquire(ctx, driver.AcquireRequest{Key: other, Token: token, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past any delay before a backend watches its holds
	if _, err := fr.ForceRelease(ctx, other, driver.ForceOptions{Reason: "one of two"}); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("force release is switched off in this backend's configuration: %v", err)
	} else if err != nil {
		t.Fatal(err)
	}
	if gb.Lost != nil {
		select {
		case <-gb.Lost.Done():
		case <-time.After(2 * time.Second):
			t.Logf("the forced-out hold was not told within 2 s; it learns at its renewal")
		}
	}
	time.Sleep(200 * time.Millisecond) // any late notice of the forced release
	if ga.Lost != nil && ga.Lost.Err() != nil {
		t.Fatalf("the hold of %q under the same token was reported lost (%v) by the forced release of %q", a, context.Cause(ga.Lost), other)
	}
	if err := b.Renew(ctx, a, token, time.Minute); err != nil {
		t.Fatalf("renew %q after the forced release of %q: %v", a, other, err)
	}
	if err := b.Release(ctx, a, token); err != nil {
		t.Fatal(err)
	}
}
