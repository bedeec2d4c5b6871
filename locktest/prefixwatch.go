package locktest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// prefixWatch: a backend that tells of changes under a prefix
// (driver.PrefixWatcher) reports a grant, a release and an expiry made by
// another client under the prefix, and nothing outside it; the watch ends,
// closing its channel, when its context ends or its client closes. A backend without it answers
// errors.ErrUnsupported, as may one configured so that it cannot (redislock
// over go-redis).
func (s *suite) prefixWatch(t *testing.T) {
	ctx := testContext(t, time.Minute)
	c := s.client(t)
	base := s.key(t)
	prefix := base + "/"
	if _, ok := c.Backend().(driver.PrefixWatcher); !ok {
		if _, err := c.WatchPrefix(ctx, prefix); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("WatchPrefix on a backend that cannot: %v, want errors.ErrUnsupported", err)
		}
		t.Skip("the backend does not tell of changes under a prefix")
	}
	wctx, stop := context.WithCancel(ctx)
	ch, err := c.WatchPrefix(wctx, prefix)
	if errors.Is(err, errors.ErrUnsupported) {
		stop()
		t.Skipf("watching a prefix is unsupported in this backend's configuration: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	other := s.client(t)
	outside := mustLock(t, ctx, other, base+"~") // after the prefix's keys
	defer outside.Release(ctx)
	key := prefix + "a"
	l := mustLock(t, ctx, other, key)
	expectKey(t, ch, key, "a grant")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	expectKey(t, ch, key, "a release")
	short := prefix + "short"
	if _, err := other.Backend().Acquire(ctx, driver.AcquireRequest{Key: short, Token: "prefix-watch-vanished-holder", TTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	expectKey(t, ch, short, "a grant")
	expectExpiry(t, ctx, ch, other, short) // nobody renews or releases it
	stop()
	expectClosed(t, ch, base+"~", "its context ended")
	closing := s.client(t)
	ch, err = closing.WatchPrefix(ctx, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := closing.Close(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, ch, base+"~", "its client closed")
}

// expectClosed waits up to 10s for ch to close, after why, and fails if a
// batch names outside, a key the watch must not report.
func expectClosed(t *testing.T, ch <-chan []string, outside, why string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case batch, ok := <-ch:
			if !ok {
				return
			}
			if slices.Contains(batch, outside) {
				t.Fatalf("a key outside the prefix was reported: %q", batch)
			}
		case <-deadline:
			t.Fatalf("the watch's channel stayed open 10s after %s", why)
		}
	}
}

// expectExpiry waits up to 15s for a batch naming key, whose 1s lease
// nobody renews. A store that does not end an unrenewed hold by itself
// (ZooKeeper keeps it until a waiter comes: Inspect still reports it held,
// with no time to live left) has no expiry to report.
func expectExpiry(t *testing.T, ctx context.Context, ch <-chan []string, c *distlock.Client, key string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	check := time.NewTicker(500 * time.Millisecond)
	defer check.Stop()
	lapsed := time.Now().Add(3 * time.Second) // the lease and any store's slack
	for {
		select {
		case batch, ok := <-ch:
			if !ok {
				t.Fatalf("the watch ended before it reported an expiry of %q", key)
			}
			if len(batch) == 0 || slices.Contains(batch, key) {
				return
			}
		case <-check.C:
			if time.Now().Before(lapsed) {
				continue
			}
			info, err := c.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if info.Held {
				t.Logf("the store keeps %q held past its lease (time to live %v): no expiry to report", key, info.TTL)
				return
			}
		case <-deadline:
			t.Fatalf("no report of an expiry of %q within 15s", key)
		}
	}
}

// expectKey waits up to 15s for a batch of ch naming key, the sign of what;
// an empty batch (read again) counts too, since it covers every key.
func expectKey(t *testing.T, ch <-chan []string, key, what string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case batch, ok := <-ch:
			if !ok {
				t.Fatalf("the watch ended before it reported %s of %q", what, key)
			}
			if len(batch) == 0 || slices.Contains(batch, key) {
				return
			}
		case <-deadline:
			t.Fatalf("no report of %s of %q within 15s", what, key)
		}
	}
}
