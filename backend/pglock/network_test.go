package pglock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
)

// TestNetworkFaults holds locks through a TCP proxy and breaks the link.
func TestNetworkFaults(t *testing.T) {
	s := testserver.Postgres(t)
	direct := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer direct.Close()
	viaProxy := func(t *testing.T, opts ...pglock.Option) (*distlock.Client, *faultproxy.Proxy) {
		p := faultproxy.Start(t, s.Addr())
		dsn := strings.Replace(testserver.PostgresDSN(s), s.Addr(), p.Addr(), 1)
		b, err := pglock.Open(context.Background(), dsn+"&pool_max_conns=2", append([]pglock.Option{pglock.WithKeepalive(100 * time.Millisecond)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		c := distlock.New(b)
		t.Cleanup(func() { _ = c.Close() })
		return c, p
	}

	// A cut connection ends the session on both sides: the holder is told
	// within a keepalive and the key is free for others.
	t.Run("Cut", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		c, p := viaProxy(t)
		key := uniqueKey(t)
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		p.Cut()
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a cut connection was not reported lost within 5s")
		}
		if !errors.Is(l.Err(), distlock.ErrLockLost) {
			t.Fatalf("Err = %v, want ErrLockLost", l.Err())
		}
		l2, err := direct.Lock(ctx, key, distlock.WithWait(10*time.Second))
		if err != nil {
			t.Fatalf("the key stayed held after the holder's connection was cut: %v", err)
		}
		_ = l2.Release(ctx)
	})

	// A partition keeps the server's session, and so the lock, alive: the
	// holder reports the lock lost once it cannot confirm it, yet nobody
	// else gets the key until the link is back and the server sees the
	// session end. Exclusion holds; the key is blocked meanwhile.
	t.Run("Partition", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		c, p := viaProxy(t)
		key := uniqueKey(t)
		l, err := c.TryLock(ctx, key, distlock.WithLease(500*time.Millisecond), distlock.WithWatchdog(true))
		if err != nil {
			t.Fatal(err)
		}
		p.Blackhole()
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("a partitioned holder was not told within 5s")
		}
		if _, err := direct.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryLock during the partition: %v, want ErrNotAcquired (the session still holds the lock)", err)
		}
		p.Restore()
		l2, err := direct.Lock(ctx, key, distlock.WithWait(15*time.Second))
		if err != nil {
			t.Fatalf("the key stayed held after the partition healed: %v", err)
		}
		if l2.Fence() <= l.Fence() {
			t.Fatalf("fence %d not above %d", l2.Fence(), l.Fence())
		}
		_ = l2.Release(ctx)
	})

	// A slow link that still answers within the lease (1.2s round trips
	// for a 3s lease) keeps the hold: the backend's own keepalive query may
	// take until the lease ends, as a renewal to any store may. It used to
	// be cut after a second, which ended the session and the lock while
	// the lease had two seconds to run.
	t.Run("SlowKeepaliveWithinLease", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		c, p := viaProxy(t)
		key := uniqueKey(t)
		const lease = 3 * time.Second
		l, err := c.TryLock(ctx, key, distlock.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		p.SetLatency(600 * time.Millisecond)
		time.Sleep(lease * 8 / 10)
		if err := l.Err(); err != nil {
			t.Fatalf("the hold ended within its lease on a slow link: %v", err)
		}
		if _, err := direct.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("another client's TryLock within the lease: %v, want ErrNotAcquired", err)
		}
		p.Restore()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	})

	// A renewal that takes longer than the request timeout on a slow link,
	// but ends within the lease, renews: the session is not cut while the
	// lease it holds still runs.
	t.Run("SlowRenewalWithinLease", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		c, p := viaProxy(t, pglock.WithRequestTimeout(time.Second), pglock.WithKeepalive(time.Minute))
		key := uniqueKey(t)
		const lease = 4 * time.Second
		l, err := c.TryLock(ctx, key, distlock.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // the holder row is written
		p.SetLatency(700 * time.Millisecond)
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("a renewal within the lease on a slow link: %v", err)
		}
		p.Restore()
		if err := l.Err(); err != nil {
			t.Fatalf("the hold ended: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	})
}
