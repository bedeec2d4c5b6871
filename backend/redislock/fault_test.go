package redislock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
)

// adapters build a backend on addr with each client library; go-redis also
// without ContextTimeoutEnabled, where the backend bounds requests itself.
var adapters = []struct {
	name string
	new  func(t testing.TB, addr string) driver.Backend
}{
	{"rueidis", func(t testing.TB, addr string) driver.Backend { return openURL(t, "redis://"+addr) }},
	{"go-redis", func(t testing.TB, addr string) driver.Backend {
		return newGoRedis(t, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}},
	{"go-redis-default-options", func(t testing.TB, addr string) driver.Backend {
		return newGoRedis(t, redis.NewClient(&redis.Options{Addr: addr}))
	}},
}

// onEachClient runs test against server s once per client library (rueidis,
// and go-redis with ContextTimeoutEnabled), each on a backend of its own.
func onEachClient(t *testing.T, s *testserver.Server, test func(t *testing.T, ctx context.Context, b driver.Backend)) {
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			b := a.new(t, s.Addr())
			defer b.Close()
			test(t, testContext(t), b)
		})
	}
}

func newClient(t *testing.T, b driver.Backend) *distlock.Client {
	c := distlock.New(b)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPartitionedHolderLosesFirst cuts or blackholes the holder's link to
// Redis: the holder must learn that its lock is lost before a client with a
// direct link can take the key.
func TestPartitionedHolderLosesFirst(t *testing.T) {
	s := testserver.Redis(t)
	faults := map[string]func(*faultproxy.Proxy){"cut": (*faultproxy.Proxy).Cut, "blackhole": (*faultproxy.Proxy).Blackhole}
	for _, a := range adapters {
		for fname, fault := range faults {
			t.Run(a.name+"/"+fname, func(t *testing.T) {
				ctx := testContext(t)
				p := faultproxy.Start(t, s.Addr())
				holder := newClient(t, a.new(t, p.Addr()))
				other := newClient(t, a.new(t, s.Addr()))
				key := "partition/" + t.Name()
				l, err := holder.Lock(ctx, key, distlock.WithLease(600*time.Millisecond), distlock.WithWatchdog(true))
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond) // at least one renewal through the proxy
				fault(p)
				defer p.Restore() // let the holder's release reach Redis in cleanup
				deadline := time.Now().Add(10 * time.Second)
				for {
					l2, err := other.TryLock(ctx, key)
					if err == nil {
						select {
						case <-l.Done():
						default:
							t.Fatal("another client acquired the key while the partitioned holder still believed it held it")
						}
						if !errors.Is(l.Err(), distlock.ErrLockLost) {
							t.Fatalf("holder Err = %v, want ErrLockLost", l.Err())
						}
						_ = l2.Release(ctx)
						return
					}
					if !errors.Is(err, distlock.ErrNotAcquired) {
						t.Fatal(err)
					}
					if time.Now().After(deadline) {
						t.Fatal("the key never became free after the holder was partitioned")
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
}

// grantFences locks and releases key n times and returns the highest fence.
func grantFences(t *testing.T, ctx context.Context, c *distlock.Client, key string, n int) uint64 {
	t.Helper()
	var last uint64
	for range n {
		l, err := c.Lock(ctx, key, distlock.WithWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d not above %d", l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// TestFenceSurvivesRestartWithoutPersistence kills Redis, which keeps no
// data, and checks that the counter starting over still yields higher fences.
func TestFenceSurvivesRestartWithoutPersistence(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			key := "restart/" + t.Name()
			before := grantFences(t, ctx, newClient(t, a.new(t, s.Addr())), key, 5)
			s.Kill()
			s.Start()
			if n := rawCommand(t, []string{s.Addr()}, "EXISTS", lockName(key)+":fence"); n != "0" {
				t.Fatalf("the fence counter survived the restart (EXISTS = %s); the test proves nothing", n)
			}
			after := grantFences(t, ctx, newClient(t, a.new(t, s.Addr())), key, 1)
			if after <= before {
				t.Fatalf("fence after a restart without persistence %d, not above %d from before", after, before)
			}
		})
	}
}

// TestFenceSurvivesFailover promotes a replica whose counter is behind (its
// copy was deleted, as if the last writes never reached it) and checks that
// fences keep increasing, with each client following the sentinels.
func TestFenceSurvivesFailover(t *testing.T) {
	s := testserver.RedisSentinel(t)
	sentinels := s.SentinelAddrs()
	clients := map[string]func(t testing.TB) driver.Backend{
		"rueidis": func(t testing.TB) driver.Backend {
			return openURL(t, "redis-sentinel://"+sentinels[0]+"/"+testserver.SentinelMaster+"?addr="+sentinels[1])
		},
		"go-redis": func(t testing.TB) driver.Backend {
			return newGoRedis(t, redis.NewFailoverClient(&redis.FailoverOptions{
				MasterName: testserver.SentinelMaster, SentinelAddrs: sentinels, ContextTimeoutEnabled: true}))
		},
	}
	for _, name := range []string{"rueidis", "go-redis"} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			key := "failover/" + t.Name()
			c := newClient(t, clients[name](t))
			before := grantFences(t, ctx, c, key, 5)
			replica := s.Replica().Addr()
			rawCommand(t, []string{replica}, "CONFIG", "SET", "replica-read-only", "no")
			rawCommand(t, []string{replica}, "DEL", lockName(key)+":fence")
			primary := s.Failover(t).Addr()
			if n := rawCommand(t, []string{primary}, "EXISTS", lockName(key)+":fence"); n != "0" {
				t.Fatalf("the new primary has the fence counter (EXISTS = %s); the test proves nothing", n)
			}
			followPrimary(t, ctx, c, primary)
			after := grantFences(t, ctx, c, key, 1)
			if after <= before {
				t.Fatalf("fence after failover %d, not above %d from before", after, before)
			}
		})
	}
}

// followPrimary waits until c's locks land on primary. A client hears of a
// failover from the sentinels a moment after they announce it, and a lock
// taken on the old primary in between is lost with it: Redis replication
// promises no more.
func followPrimary(t *testing.T, ctx context.Context, c *distlock.Client, primary string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		probe := "follow/" + t.Name() + "/" + strconv.Itoa(i)
		if l, err := c.TryLock(ctx, probe); err == nil {
			landed := rawCommand(t, []string{primary}, "EXISTS", lockName(probe))
			_ = l.Release(ctx) // fails when the lock was lost with the old primary
			if landed == "1" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client's locks still miss the new primary %s 10s after the failover", primary)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestStaleReleaseKeepsNewHolder releases, after its expiry, a token whose
// key another token holds now: nothing may change.
func TestStaleReleaseKeepsNewHolder(t *testing.T) {
	onEachClient(t, testserver.Redis(t), func(t *testing.T, ctx context.Context, b driver.Backend) {
		key := "stale/" + t.Name()
		slow := driver.AcquireRequest{Key: key, Token: "slow-holder-token", TTL: 50 * time.Millisecond}
		if _, err := b.Acquire(ctx, slow); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "new-holder-token", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Release(ctx, key, slow.Token); !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("stale release: got %v, want ErrNotHeld", err)
		}
		if err := b.Renew(ctx, key, slow.Token, time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("stale renew: got %v, want ErrNotHeld", err)
		}
		info, err := b.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Fence != g.Fence || info.TTL < 50*time.Second {
			t.Fatalf("after a stale release: %+v, want held with fence %d and its TTL", info, g.Fence)
		}
		if err := b.Release(ctx, key, "new-holder-token"); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAcquireIdempotent retries an acquisition by the token that holds.
func TestAcquireIdempotent(t *testing.T) {
	onEachClient(t, testserver.Redis(t), func(t *testing.T, ctx context.Context, b driver.Backend) {
		req := driver.AcquireRequest{Key: "retry/" + t.Name(), Token: "tok", TTL: time.Minute}
		g1, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		g2, err := b.Acquire(ctx, req)
		if err != nil || g2.Fence != g1.Fence {
			t.Fatalf("retried acquire = %+v, %v; want fence %d", g2, err, g1.Fence)
		}
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: req.Key, Token: "other", TTL: time.Minute}); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("another token: got %v, want ErrNotAcquired", err)
		}
		if err := b.Release(ctx, req.Key, req.Token); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFenceAboveCounterAheadOfClock sets a key's counter above the server's
// clock, as a clock stepped back would leave it: fences must go on from the
// counter, not from the clock, and the counter must not expire before the
// clock has passed it.
func TestFenceAboveCounterAheadOfClock(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		key := "ahead/" + t.Name()
		const ahead = 8_000_000_000_000_000 // year 2223 in µs, below 2⁵³
		rawCommand(t, []string{s.Addr()}, "SET", lockName(key)+":fence", strconv.Itoa(ahead))
		for i := uint64(1); i <= 3; i++ {
			g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "tok", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if g.Fence != ahead+i {
				t.Fatalf("grant %d: fence %d, want %d", i, g.Fence, ahead+i)
			}
			// The counter must outlive the time until the clock passes it.
			untilPassed := time.Until(time.UnixMicro(ahead)).Milliseconds()
			if ms := pttl(t, s.Addr(), lockName(key)+":fence"); ms < untilPassed {
				t.Fatalf("grant %d: counter PTTL %d ms, want at least %d (until the clock passes it)", i, ms, untilPassed)
			}
			if err := b.Release(ctx, key, "tok"); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestRetryAfterCounterLostGrantsNewFence retries an acquisition by the
// holding token after the counter vanished: the retry must not report a
// fence the store no longer has, but grant a fresh one and renew the lease.
func TestRetryAfterCounterLostGrantsNewFence(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		req := driver.AcquireRequest{Key: "lost-counter/" + t.Name(), Token: "tok", TTL: 2 * time.Second}
		g1, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		rawCommand(t, []string{s.Addr()}, "DEL", lockName(req.Key)+":fence")
		req.TTL = time.Minute
		g2, err := b.Acquire(ctx, req)
		if err != nil || g2.Fence <= g1.Fence {
			t.Fatalf("retry after the counter was lost = %+v, %v; want a fence above %d", g2, err, g1.Fence)
		}
		info, err := b.Inspect(ctx, req.Key)
		if err != nil || !info.Held || info.Fence != g2.Fence || info.TTL < 50*time.Second {
			t.Fatalf("after the retry: %+v, %v; want held with fence %d and the new lease", info, err, g2.Fence)
		}
	})
}
