package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// TestRenewNewTTL renews a hold with a longer and then a shorter ttl, as
// Lock.Extend does: the store keeps the key for the new ttl (past the first
// one for the longer, no longer than asked for the shorter), Inspect reports
// it, the fence and the entry stay, the lease the entry left is revoked, and
// Release afterwards frees the key.
func TestRenewNewTTL(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			eps := srv.start(t)
			cli, prefix := admin(t, eps), uniquePrefix(t)
			b := dial(t, eps, prefix)
			defer b.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// long leaves room between a loss after short and one after long:
			// on a loaded machine etcd's expiry and its notice took 3.5s.
			const short, long = time.Second, 5 * time.Second

			// A spare lease of the longer TTL, so that the move reuses one.
			warm := driver.AcquireRequest{Key: "warm", Token: "warm", TTL: long}
			if _, err := b.Acquire(ctx, warm); err != nil {
				t.Fatal(err)
			}
			if err := b.Release(ctx, warm.Key, warm.Token); err != nil {
				t.Fatal(err)
			}

			const key = "extended"
			req := driver.AcquireRequest{Key: key, Token: "holder", TTL: short}
			g, err := b.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			q := entries(t, cli, prefix, key)
			if len(q) != 1 {
				t.Fatalf("queue after acquire: %q", q)
			}
			entry, first := q[0], leaseOf(t, cli, q[0])

			start := time.Now()
			if err := b.Renew(ctx, key, req.Token, long); err != nil {
				t.Fatalf("renew with %v: %v", long, err)
			}
			held(t, ctx, b, cli, key, entry, g.Fence, long-time.Second, long)
			if ttl := leaseTTL(t, cli, first); ttl != -1 {
				t.Fatalf("the first lease has %ds left after the move, want it revoked", ttl)
			}
			// Past the first TTL and etcd's 1s floor, with no renewal.
			time.Sleep(time.Until(start.Add(2500 * time.Millisecond)))
			held(t, ctx, b, cli, key, entry, g.Fence, 0, long)
			select {
			case <-g.Lost.Done():
				t.Fatal("Grant.Lost done within the longer ttl")
			default:
			}
			if err := b.Renew(ctx, key, req.Token, long); err != nil { // the same ttl again
				t.Fatalf("second renew with %v: %v", long, err)
			}
			held(t, ctx, b, cli, key, entry, g.Fence, long-time.Second, long)

			longLease := leaseOf(t, cli, entry)
			if err := b.Renew(ctx, key, req.Token, short); err != nil {
				t.Fatalf("renew with %v: %v", short, err)
			}
			held(t, ctx, b, cli, key, entry, g.Fence, 0, short)
			if ttl := leaseTTL(t, cli, longLease); ttl != -1 {
				t.Fatalf("the longer lease has %ds left after the move back, want it revoked", ttl)
			}
			if err := b.Release(ctx, key, req.Token); err != nil {
				t.Fatalf("release after the renewals: %v", err)
			}
			if q := entries(t, cli, prefix, key); len(q) != 0 {
				t.Fatalf("queue after release: %q", q)
			}
			if err := b.Renew(ctx, key, req.Token, long); !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("renew after release: got %v, want ErrNotHeld", err)
			}
			g2, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "next", TTL: short})
			if err != nil {
				t.Fatalf("acquire after release: %v", err)
			}
			if g2.Fence <= g.Fence {
				t.Fatalf("fence %d after the release of fence %d", g2.Fence, g.Fence)
			}
			if err := b.Release(ctx, key, "next"); err != nil {
				t.Fatal(err)
			}

			// A shorter ttl: the store drops the key after it, not after the first.
			req = driver.AcquireRequest{Key: "shortened", Token: "shortened", TTL: long}
			g, err = b.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			if err := b.Renew(ctx, req.Key, req.Token, short); err != nil {
				t.Fatalf("renew with %v: %v", short, err)
			}
			select {
			case <-g.Lost.Done():
				if d := time.Since(start); d < short {
					t.Fatalf("lost %v after renewing with %v", d, short)
				}
			case <-time.After(long - 200*time.Millisecond):
				t.Fatalf("not lost %v after renewing with %v", long-200*time.Millisecond, short)
			}
			if err := b.Release(ctx, req.Key, req.Token); !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("release of the expired hold: got %v, want ErrNotHeld", err)
			}
		})
	}
}

// TestRenewNewTTLConcurrentRelease renews with alternating ttls from several
// goroutines while the hold is released: every renewal either succeeds or
// reports ErrNotHeld, and the release leaves no entry behind.
func TestRenewNewTTLConcurrentRelease(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli, prefix := admin(t, eps), uniquePrefix(t)
	b := dial(t, eps, prefix)
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range 5 {
		req := driver.AcquireRequest{Key: "busy", Token: fmt.Sprint("t", i), TTL: 2 * time.Second}
		if _, err := b.Acquire(ctx, req); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8*4)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range 8 {
					ttl := time.Duration(2+(g+n)%3) * time.Second
					if err := b.Renew(ctx, req.Key, req.Token, ttl); err != nil && !errors.Is(err, driver.ErrNotHeld) {
						errs <- err
					}
				}
			}()
		}
		time.Sleep(time.Duration(i) * 20 * time.Millisecond)
		if err := b.Release(ctx, req.Key, req.Token); err != nil {
			t.Fatalf("release during renewals: %v", err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("renew: %v", err)
		}
		if q := entries(t, cli, prefix, req.Key); len(q) != 0 {
			t.Fatalf("queue after release: %q", q)
		}
	}
}

// held checks that key is held by entry with fence and a store-side TTL
// in [lo, hi], by Inspect and by the entry's lease.
func held(t *testing.T, ctx context.Context, b *etcdlock.Backend, cli *clientv3.Client, key, entry string, fence uint64, lo, hi time.Duration) {
	t.Helper()
	info, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != fence || info.TTL < lo || info.TTL > hi {
		t.Fatalf("Inspect: %+v, want held with fence %d and a TTL in [%v, %v]", info, fence, lo, hi)
	}
	resp, err := cli.Get(ctx, entry)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || uint64(resp.Kvs[0].CreateRevision) != fence {
		t.Fatalf("entry %q: %v, want it with create revision %d", entry, resp.Kvs, fence)
	}
}

// leaseTTL returns the seconds left on lease, -1 if it is gone.
func leaseTTL(t *testing.T, cli *clientv3.Client, lease clientv3.LeaseID) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.TimeToLive(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	return resp.TTL
}
