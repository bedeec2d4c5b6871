package distlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
)

// capped is a store that keeps a key at most limit after its grant, as a
// lock service's hold cap does: it grants and renews for less than asked
// when less is left, says so (driver.TTLRenewer), and refuses a renewal
// once nothing is left.
type capped struct {
	driver.Backend
	limit time.Duration

	mu      sync.Mutex
	granted map[string]time.Time // by token
}

func newCapped(limit time.Duration) *capped {
	return &capped{Backend: memlock.New(), limit: limit, granted: map[string]time.Time{}}
}

func (c *capped) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	asked := r.TTL
	r.TTL = min(r.TTL, c.limit)
	g, err := c.Backend.Acquire(ctx, r)
	if err != nil {
		return g, err
	}
	c.mu.Lock()
	c.granted[r.Token] = time.Now()
	c.mu.Unlock()
	if r.TTL < asked {
		g.TTL = r.TTL
	}
	return g, nil
}

func (c *capped) RenewTTL(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	c.mu.Lock()
	left := c.limit - time.Since(c.granted[token])
	c.mu.Unlock()
	if left <= 0 {
		return 0, fmt.Errorf("capped: %w", driver.ErrNotHeld)
	}
	ttl = min(ttl, left)
	return ttl, c.Backend.Renew(ctx, key, token, ttl)
}

func (c *capped) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	_, err := c.RenewTTL(ctx, key, token, ttl)
	return err
}

// A store that grants or renews for less than asked (a lock service's hold
// cap) ends the holder's validity with what it gave: the holder is told
// before the store frees the key, with an explicit lease and with the
// watchdog's renewals.
func TestStoreGivesLessThanAsked(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []distlock.Option
	}{
		{"explicit lease", []distlock.Option{distlock.WithLease(3 * time.Second)}},
		{"watchdog", []distlock.Option{distlock.WithLease(900 * time.Millisecond), distlock.WithWatchdog(true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const limit = 1500 * time.Millisecond
				ctx := context.Background()
				store := newCapped(limit)
				c, other := distlock.New(store), distlock.New(store.Backend)
				defer c.Close()
				defer other.Close()
				start := time.Now()
				l, err := c.TryLock(ctx, "capped", tc.opts...)
				if err != nil {
					t.Fatal(err)
				}
				if end := start.Add(limit); l.ExpiresAt().After(end) {
					t.Fatalf("ExpiresAt %v after the store's end of the hold, %v later", l.ExpiresAt().Sub(start), l.ExpiresAt().Sub(end))
				}
				l2, err := other.Lock(ctx, "capped", distlock.WithWait(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				defer l2.Release(ctx)
				if took := time.Since(start); took < limit {
					t.Fatalf("another client got the key after %v, before the cap of %v", took, limit)
				}
				select {
				case <-l.Done():
				default:
					t.Fatalf("another client got the key while the capped holder was not told: Err = %v", l.Err())
				}
			})
		})
	}
}
