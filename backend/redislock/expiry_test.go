package redislock_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// counterLinger is how long a fence counter outlives the lease of its last
// grant or renewal (the package's fenceLinger).
const counterLinger = time.Minute

// pttl returns the milliseconds name has left to live (-1: no expiry, -2: gone).
func pttl(t testing.TB, addr, name string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rawCommand(t, []string{addr}, "PTTL", name), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestFenceCounterExpires checks that the fence counter expires a while after
// the lease of its last grant or renewal, and that fences still increase once
// it has expired: the next one comes from the server's clock.
func TestFenceCounterExpires(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		key := "expiry/" + t.Name()
		counter := lockName(key) + ":fence"
		var last uint64
		for i, lease := range []time.Duration{time.Second, 10 * time.Second} {
			req := driver.AcquireRequest{Key: key, Token: fmt.Sprint("tok-", i), TTL: lease}
			g, err := b.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			if g.Fence <= last {
				t.Fatalf("grant %d: fence %d not above %d", i, g.Fence, last)
			}
			last = g.Fence
			if ms := pttl(t, s.Addr(), counter); ms <= lease.Milliseconds() || ms > (lease+counterLinger).Milliseconds() {
				t.Fatalf("grant %d with lease %v: counter PTTL %d ms, want in (%d, %d]", i, lease, ms, lease.Milliseconds(), (lease + counterLinger).Milliseconds())
			}
			// A renewal with a longer lease keeps the counter beyond it.
			if err := b.Renew(ctx, key, req.Token, 5*time.Minute); err != nil {
				t.Fatal(err)
			}
			if ms := pttl(t, s.Addr(), counter); ms <= (5 * time.Minute).Milliseconds() {
				t.Fatalf("grant %d renewed for 5m: counter PTTL %d ms, want above the lease", i, ms)
			}
			if err := b.Release(ctx, key, req.Token); err != nil {
				t.Fatal(err)
			}
			// Force the expiry: a PEXPIREAT in the past expires the key at once.
			rawCommand(t, []string{s.Addr()}, "PEXPIREAT", counter, "1")
			if n := rawCommand(t, []string{s.Addr()}, "EXISTS", counter); n != "0" {
				t.Fatalf("the counter did not expire (EXISTS = %s); the test proves nothing", n)
			}
		}
		if info, err := b.Inspect(ctx, key); err != nil || info.Held || info.Fence != 0 {
			t.Fatalf("after the counter expired: %+v, %v; want free, no fence", info, err)
		}
	})
}

// TestManyKeysLeaveNoPermanentKey locks and releases many distinct keys, some
// with metadata, and checks that every key left in Redis expires.
func TestManyKeysLeaveNoPermanentKey(t *testing.T) {
	const keys, workers = 4096, 16
	s := testserver.Redis(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newClient(t, openURL(t, "redis://"+s.Addr()))
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < keys; i += workers {
				opts := []distlock.Option{}
				if i%2 == 0 {
					opts = append(opts, distlock.WithOwner("worker"))
				}
				l, err := c.TryLock(ctx, fmt.Sprint("many/", i), opts...)
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)

	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rdb.Close()
	var found, permanent int
	it := rdb.Scan(ctx, 0, "*", 1000).Iterator()
	for it.Next(ctx) {
		found++
		if d, err := rdb.PTTL(ctx, it.Val()).Result(); err != nil {
			t.Fatal(err)
		} else if d < 0 {
			permanent++
			if permanent <= 3 {
				t.Errorf("key %q has no expiry (PTTL %v)", it.Val(), d)
			}
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keys locked and released in %v; %d keys left in Redis, %d without expiry", keys, elapsed, found, permanent)
	if found == 0 {
		t.Fatal("SCAN found no key: the test proves nothing")
	}
	if permanent > 0 {
		t.Fatalf("%d of %d keys left without expiry", permanent, found)
	}
}
