package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// semNames are the Redis names of semaphore name under the default prefix
// (test names need no escaping), as the package doc lays them out.
func semNames(name string) []string {
	base := lockName(name) + ":sem"
	return []string{base, base + ":holders", base + ":limit", base + ":fence", base + ":watchers",
		base + ":weights", base + ":intents", base + ":lapses"}
}

// awaitWake reports whether wake fires within d.
func awaitWake(wake <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-wake:
		return true
	case <-t.C:
		return false
	}
}

// TestSemaphoreWatchNotices watches a semaphore from one backend while
// another holds its permit: the release, and then a change of the limit,
// must each wake the watcher by a notice on the watcher's backend channel
// (nothing else wakes it within the wait), and stop must take the watcher's
// entry out of Redis.
func TestSemaphoreWatchNotices(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			watcher, holder := a.new(t, s.Addr()), a.new(t, s.Addr())
			defer watcher.Close()
			defer holder.Close()
			name := "sem-watch/" + a.name
			hs := holder.(driver.Semaphores)
			req := driver.AcquireRequest{Key: name, Token: "held", TTL: time.Minute}
			if _, err := hs.AcquirePermit(ctx, req, 1); err != nil {
				t.Fatal(err)
			}
			wake, stop, err := watcher.(driver.Semaphores).WatchPermits(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			// The first watch subscribes the backend; the confirmation wakes
			// the watcher, since a notice sent before it never came.
			if !awaitWake(wake, 5*time.Second) {
				t.Fatal("no wake when the subscription was confirmed")
			}
			if awaitWake(wake, 100*time.Millisecond) {
				t.Fatal("woken while the permit is held")
			}
			if err := hs.ReleasePermit(ctx, name, "held"); err != nil {
				t.Fatal(err)
			}
			if !awaitWake(wake, 2*time.Second) {
				t.Fatal("no notice of the release within 2s")
			}
			if err := hs.SetPermits(ctx, name, 2); err != nil {
				t.Fatal(err)
			}
			if !awaitWake(wake, 2*time.Second) {
				t.Fatal("no notice of the new limit within 2s")
			}
			w := semNames(name)[4]
			if n := rawCommand(t, []string{s.Addr()}, "ZCARD", w); n != "1" {
				t.Fatalf("%s watchers entered, want 1", n)
			}
			stop()
			eventually(t, "the watcher's entry taken out after stop", func() error {
				if n := rawCommand(t, []string{s.Addr()}, "ZCARD", w); n != "0" {
					return errors.New(n + " watchers left")
				}
				return nil
			})
		})
	}
}

// TestSemaphorePermitLifecycle drives the calls directly on each client: a
// retried acquire gets its grant back, renew and release of an expired
// permit fail with ErrNotHeld, Inspect reports the live permits with their
// metadata, and bad input fails with ErrInvalidOption or ErrInvalidKey.
func TestSemaphorePermitLifecycle(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		sem := b.(driver.Semaphores)
		name := "sem-life/" + t.Name()
		a := driver.AcquireRequest{Key: name, Token: "a", TTL: time.Minute, Meta: driver.Meta{Owner: "alice"}}
		g, err := sem.AcquirePermit(ctx, a, 2)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := sem.AcquirePermit(ctx, a, 2); err != nil || again.Fence != g.Fence {
			t.Fatalf("retried acquire: %+v, %v; want fence %d", again, err, g.Fence)
		}
		short := driver.AcquireRequest{Key: name, Token: "short", TTL: 100 * time.Millisecond}
		gs, err := sem.AcquirePermit(ctx, short, 2)
		if err != nil || gs.Fence <= g.Fence {
			t.Fatalf("second permit: %+v, %v; want a fence above %d", gs, err, g.Fence)
		}
		if _, err := sem.AcquirePermit(ctx, driver.AcquireRequest{Key: name, Token: "c", TTL: time.Minute}, 2); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("third permit of 2: %v, want ErrNotAcquired", err)
		}
		limit, held, err := sem.InspectPermits(ctx, name)
		if err != nil || limit != 2 || len(held) != 2 || held[0].Fence != g.Fence || held[0].Meta.Owner != "alice" ||
			held[0].TTL <= 50*time.Second || held[1].TTL > 100*time.Millisecond {
			t.Fatalf("inspect: %d, %+v, %v", limit, held, err)
		}
		eventually(t, "the short permit expired", func() error {
			_, held, err := sem.InspectPermits(ctx, name)
			if err == nil && len(held) != 1 {
				err = errors.New("still two permits")
			}
			return err
		})
		if err := sem.RenewPermit(ctx, name, "short", time.Minute); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("renew of an expired permit: %v, want ErrNotHeld", err)
		}
		if err := sem.ReleasePermit(ctx, name, "short"); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("release of an expired permit: %v, want ErrNotHeld", err)
		}
		if err := sem.RenewPermit(ctx, name, "a", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, held, err := sem.InspectPermits(ctx, name); err != nil || len(held) != 1 || held[0].TTL <= time.Minute {
			t.Fatalf("after renewal: %+v, %v", held, err)
		}
		if err := sem.ReleasePermit(ctx, name, "a"); err != nil {
			t.Fatal(err)
		}
		if err := sem.ReleasePermit(ctx, name, "a"); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("second release: %v, want ErrNotHeld", err)
		}
		for what, err := range map[string]error{
			"acquire with limit 0": func() error { _, err := sem.AcquirePermit(ctx, a, 0); return err }(),
			"set permits 0":        sem.SetPermits(ctx, name, 0),
			"token with a newline": func() error {
				_, err := sem.AcquirePermit(ctx, driver.AcquireRequest{Key: name, Token: "a\nb", TTL: time.Minute}, 2)
				return err
			}(),
			"no time to live": func() error {
				_, err := sem.AcquirePermit(ctx, driver.AcquireRequest{Key: name, Token: "z", TTL: 0}, 2)
				return err
			}(),
		} {
			if !errors.Is(err, driver.ErrInvalidOption) {
				t.Errorf("%s: %v, want ErrInvalidOption", what, err)
			}
		}
		if _, _, err := sem.InspectPermits(ctx, ""); !errors.Is(err, driver.ErrInvalidKey) {
			t.Errorf("inspect with no name: %v, want ErrInvalidKey", err)
		}
		if limit, _, err := sem.InspectPermits(ctx, name); err != nil || limit != 2 {
			t.Errorf("the limit after bad input: %d, %v; want 2 unchanged", limit, err)
		}
	})
}

// TestSemaphoreBesideLock uses a lock and a semaphore of one name: they
// are independent, List finds only the lock, and once both are released
// only the semaphore's limit stays for good, with the fence counter
// expiring later.
func TestSemaphoreBesideLock(t *testing.T) {
	s := testserver.Redis(t)
	ctx := testContext(t)
	b := openURL(t, "redis://"+s.Addr())
	c := newClient(t, b)
	name := "beside"
	l, err := c.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a permit of the semaphore named as a held lock: %v", err)
	}
	infos, err := c.List(ctx, "")
	if err != nil || len(infos) != 1 || infos[0].Key != name || infos[0].Fence != l.Fence() {
		t.Fatalf("List: %+v, %v; want the lock alone", infos, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("the lock's release freed a permit: %v", err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sem.Close(); err != nil {
		t.Fatal(err)
	}
	n := semNames(name)
	for _, gone := range []string{n[0], n[1]} {
		if ttl := pttl(t, s.Addr(), gone); ttl != -2 {
			t.Errorf("%s after release: PTTL %d, want gone", gone, ttl)
		}
	}
	if ttl := pttl(t, s.Addr(), n[2]); ttl != -1 {
		t.Errorf("limit: PTTL %d, want kept without expiry", ttl)
	}
	if ttl := pttl(t, s.Addr(), n[3]); ttl <= 0 || ttl > int64((counterLinger+time.Minute)/time.Millisecond) {
		t.Errorf("fence counter: PTTL %d, want expiring within the lease and a minute", ttl)
	}
}

// TestSemaphoreKeysShareSlot checks on a Cluster that the names of a
// semaphore and of a read-write lock, whatever characters the name has,
// share one slot, and that their scripts run there on both clients, a
// release waking a watcher.
func TestSemaphoreKeysShareSlot(t *testing.T) {
	c := testserver.RedisCluster(t, 3)
	addrs := c.Addrs()
	names := []string{"plain", "a}b{c", `back\]`}
	for _, name := range names {
		tag := redislock.DefaultPrefix + "{" + strings.NewReplacer(`\`, `\\`, `}`, `\]`).Replace(name) + "}"
		for base, rest := range map[string][]string{
			tag + ":sem": {":holders", ":limit", ":fence", ":watchers", ":weights", ":intents", ":lapses"},
			tag + ":rw":  {":holders", ":intents", ":fence", ":watchers"},
		} {
			slot := rawCommand(t, addrs[:1], "CLUSTER", "KEYSLOT", base)
			for _, suffix := range rest {
				if s := rawCommand(t, addrs[:1], "CLUSTER", "KEYSLOT", base+suffix); s != slot {
					t.Errorf("%s in slot %s, %s in %s", base+suffix, s, base, slot)
				}
			}
		}
	}
	for _, b := range []driver.Backend{
		openURL(t, "redis-cluster://"+addrs[0]),
		newGoRedis(t, redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})),
	} {
		ctx := testContext(t)
		sem, rw := b.(driver.Semaphores), b.(driver.RWLocks)
		for _, name := range names {
			req := driver.AcquireRequest{Key: name, Token: "tok", TTL: time.Minute}
			if _, err := sem.AcquirePermit(ctx, req, 3); err != nil {
				t.Fatalf("acquire a permit of %q: %v", name, err)
			}
			wake, stop, err := sem.WatchPermits(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if limit, held, err := sem.InspectPermits(ctx, name); err != nil || limit != 3 || len(held) == 0 {
				t.Fatalf("inspect %q: %d, %+v, %v", name, limit, held, err)
			}
			if err := sem.ReleasePermit(ctx, name, req.Token); err != nil {
				t.Fatal(err)
			}
			if !awaitWake(wake, 5*time.Second) {
				t.Errorf("watch of %q: no wake after the release", name)
			}
			stop()

			if _, err := rw.AcquireRW(ctx, req, driver.Shared); err != nil {
				t.Fatalf("read-lock %q: %v", name, err)
			}
			w := driver.AcquireRequest{Key: name, Token: "w", TTL: time.Minute, Intent: "intent"}
			if _, err := rw.AcquireRW(ctx, w, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("write-lock %q while read: %v, want ErrNotAcquired", name, err)
			}
			wake, stop, err = rw.WatchRW(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if err := rw.RenewRW(ctx, name, req.Token, time.Minute); err != nil {
				t.Fatal(err)
			}
			if mode, held, intents, err := rw.InspectRW(ctx, name); err != nil || mode != driver.Shared || len(held) != 1 || intents != 1 {
				t.Fatalf("inspect read-write lock %q: %v, %+v, %d, %v", name, mode, held, intents, err)
			}
			if err := rw.ReleaseRW(ctx, name, req.Token); err != nil {
				t.Fatal(err)
			}
			if !awaitWake(wake, 5*time.Second) {
				t.Errorf("watch of read-write lock %q: no wake after the release", name)
			}
			if err := rw.WithdrawIntent(ctx, name, "intent"); err != nil {
				t.Fatal(err)
			}
			stop()
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSemaphoreAfterClose calls every semaphore method after Close: each
// must fail at once with ErrClosed.
func TestSemaphoreAfterClose(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			b := a.new(t, s.Addr())
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			sem := b.(driver.Semaphores)
			req := driver.AcquireRequest{Key: "closed", Token: "t", TTL: time.Minute}
			for op, call := range map[string]func() error{
				"acquire":     func() error { _, err := sem.AcquirePermit(ctx, req, 1); return err },
				"renew":       func() error { return sem.RenewPermit(ctx, "closed", "t", time.Minute) },
				"release":     func() error { return sem.ReleasePermit(ctx, "closed", "t") },
				"set permits": func() error { return sem.SetPermits(ctx, "closed", 2) },
				"inspect":     func() error { _, _, err := sem.InspectPermits(ctx, "closed"); return err },
				"watch":       func() error { _, _, err := sem.WatchPermits(ctx, "closed"); return err },
				"acquire n": func() error {
					_, err := b.(driver.WeightedPermits).AcquirePermits(ctx, driver.AcquireRequest{Key: "closed", Token: "t", TTL: time.Minute, Permits: 2}, 2)
					return err
				},
				"withdraw intent": func() error { return b.(driver.WeightedPermits).WithdrawPermitIntent(ctx, "closed", "i") },
			} {
				start := time.Now()
				if err := call(); !errors.Is(err, driver.ErrClosed) {
					t.Errorf("%s: %v, want ErrClosed", op, err)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("%s took %v", op, d)
				}
			}
		})
	}
}

// TestWeightedPermitKeys takes a hold of 2 of 3 permits and leaves a
// request of 2 waiting behind it: the hold's weight lives as long as the
// hold and goes with its release; the waiting request's intent keeps a
// single permit out, and both intent sets expire with it, after
// driver.WriteIntentTTL.
func TestWeightedPermitKeys(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		w := b.(driver.WeightedPermits)
		sem := b.(driver.Semaphores)
		name := "sem-weighted/" + t.Name()
		n := semNames(name)
		two := driver.AcquireRequest{Key: name, Token: "two", TTL: time.Minute, Permits: 2}
		if _, err := w.AcquirePermits(ctx, two, 3); err != nil {
			t.Fatal(err)
		}
		if ttl := pttl(t, s.Addr(), n[5]); ttl <= 50*time.Second.Milliseconds() || ttl > time.Minute.Milliseconds() {
			t.Fatalf("weights: PTTL %d, want the hold's lease", ttl)
		}
		if _, held, err := sem.InspectPermits(ctx, name); err != nil || len(held) != 1 || held[0].Permits != 2 {
			t.Fatalf("inspect: %+v, %v; want one hold of 2", held, err)
		}
		waiting := driver.AcquireRequest{Key: name, Token: "waiting", TTL: time.Minute, Permits: 2, Intent: "intent-waiting"}
		if _, err := w.AcquirePermits(ctx, waiting, 3); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("2 more of 3 beside a hold of 2: %v, want ErrNotAcquired", err)
		}
		for _, k := range n[6:] {
			if ttl := pttl(t, s.Addr(), k); ttl <= 0 || ttl > driver.WriteIntentTTL.Milliseconds() {
				t.Fatalf("%s: PTTL %d, want within %v", k, ttl, driver.WriteIntentTTL)
			}
		}
		one := driver.AcquireRequest{Key: name, Token: "one", TTL: time.Minute}
		if _, err := sem.AcquirePermit(ctx, one, 3); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a free permit while a request waits: %v, want ErrNotAcquired", err)
		}
		if err := sem.ReleasePermit(ctx, name, two.Token); err != nil {
			t.Fatal(err)
		}
		if ttl := pttl(t, s.Addr(), n[5]); ttl != -2 {
			t.Errorf("weights after the release: PTTL %d, want gone", ttl)
		}
		eventually(t, "the intent lapsed", func() error {
			_, err := sem.AcquirePermit(ctx, one, 3)
			return err
		})
		for _, k := range n[6:] {
			if ttl := pttl(t, s.Addr(), k); ttl != -2 {
				t.Errorf("%s after the lapse: PTTL %d, want gone", k, ttl)
			}
		}
	})
}
