package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// rwNames are the Redis names of read-write lock name under the default
// prefix (test names need no escaping), as rwlock.go lays them out.
func rwNames(name string) []string {
	base := lockName(name) + ":rw"
	return []string{base, base + ":holders", base + ":intents", base + ":fence", base + ":watchers"}
}

// TestRWLockLifecycle drives the calls directly on each client: readers
// share, a writer refused with an intent keeps a later reader out, a
// retried acquire gets its grant back, the writer's grant removes its
// intent and its fence is above the readers', Inspect reports mode, holds
// and intents, renew and release of what is not held fail with ErrNotHeld,
// bad input fails with ErrInvalidOption or ErrInvalidKey, and after the
// last release only the fence counter (and a lapsing intent) stays.
func TestRWLockLifecycle(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		rw := b.(driver.RWLocks)
		name := "rw-life/" + t.Name()
		req := func(token string) driver.AcquireRequest {
			return driver.AcquireRequest{Key: name, Token: token, TTL: time.Minute, Meta: driver.Meta{Owner: token}}
		}
		writer := func(token, intent string) driver.AcquireRequest {
			r := req(token)
			r.Intent = intent
			return r
		}
		r1, err := rw.AcquireRW(ctx, req("r1"), driver.Shared)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := rw.AcquireRW(ctx, req("r1"), driver.Shared); err != nil || again.Fence != r1.Fence {
			t.Fatalf("retried acquire: %+v, %v; want fence %d", again, err, r1.Fence)
		}
		r2, err := rw.AcquireRW(ctx, req("r2"), driver.Shared)
		if err != nil || r2.Fence <= r1.Fence {
			t.Fatalf("second reader: %+v, %v; want a fence above %d", r2, err, r1.Fence)
		}
		if _, err := rw.AcquireRW(ctx, writer("w", "intent-w"), driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a writer while two readers hold: %v, want ErrNotAcquired", err)
		}
		if _, err := rw.AcquireRW(ctx, req("r3"), driver.Shared); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a reader while a writer waits: %v, want ErrNotAcquired", err)
		}
		mode, held, intents, err := rw.InspectRW(ctx, name)
		if err != nil || mode != driver.Shared || len(held) != 2 || intents != 1 || held[0].Fence != r1.Fence ||
			held[0].Meta.Owner != "r1" || held[1].TTL <= 50*time.Second {
			t.Fatalf("inspect with two readers and a waiting writer: %v, %+v, %d, %v", mode, held, intents, err)
		}
		for _, tok := range []string{"r1", "r2"} {
			if err := rw.ReleaseRW(ctx, name, tok); err != nil {
				t.Fatal(err)
			}
		}
		w, err := rw.AcquireRW(ctx, writer("w", "intent-w"), driver.Exclusive)
		if err != nil || w.Fence <= r2.Fence {
			t.Fatalf("the writer once the readers left: %+v, %v; want a fence above %d", w, err, r2.Fence)
		}
		if _, err := rw.AcquireRW(ctx, req("w2"), driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a second writer: %v, want ErrNotAcquired", err)
		}
		mode, held, intents, err = rw.InspectRW(ctx, name)
		if err != nil || mode != driver.Exclusive || len(held) != 1 || held[0].Fence != w.Fence || intents != 0 {
			t.Fatalf("inspect with the writer: %v, %+v, %d intents, %v; want its intent gone", mode, held, intents, err)
		}
		if err := rw.RenewRW(ctx, name, "w", 2*time.Minute); err != nil {
			t.Fatal(err)
		}
		if _, held, _, err := rw.InspectRW(ctx, name); err != nil || len(held) != 1 || held[0].TTL <= time.Minute {
			t.Fatalf("after renewal: %+v, %v", held, err)
		}
		if err := rw.RenewRW(ctx, name, "r1", time.Minute); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("renew of a released hold: %v, want ErrNotHeld", err)
		}
		for what, err := range map[string]error{
			"mode 7": func() error { _, err := rw.AcquireRW(ctx, req("z"), driver.Mode(7)); return err }(),
			"token with a newline": func() error {
				_, err := rw.AcquireRW(ctx, req("a\nb"), driver.Shared)
				return err
			}(),
			"no time to live": func() error {
				_, err := rw.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: "z", TTL: 0}, driver.Shared)
				return err
			}(),
		} {
			if !errors.Is(err, driver.ErrInvalidOption) {
				t.Errorf("%s: %v, want ErrInvalidOption", what, err)
			}
		}
		if _, _, _, err := rw.InspectRW(ctx, ""); !errors.Is(err, driver.ErrInvalidKey) {
			t.Errorf("inspect with no name: %v, want ErrInvalidKey", err)
		}
		if err := rw.WithdrawIntent(ctx, "", "x"); !errors.Is(err, driver.ErrInvalidKey) {
			t.Errorf("withdraw with no name: %v, want ErrInvalidKey", err)
		}
		if err := rw.ReleaseRW(ctx, name, "w"); err != nil {
			t.Fatal(err)
		}
		if err := rw.ReleaseRW(ctx, name, "w"); !errors.Is(err, driver.ErrNotHeld) {
			t.Errorf("second release: %v, want ErrNotHeld", err)
		}
		// A reader's refused attempt leaves no intent; a writer's does, until
		// withdrawn.
		if _, err := rw.AcquireRW(ctx, req("r"), driver.Shared); err != nil {
			t.Fatal(err)
		}
		if _, err := rw.AcquireRW(ctx, writer("w", "intent-w"), driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a writer while a reader holds: %v", err)
		}
		if err := rw.WithdrawIntent(ctx, name, "intent-w"); err != nil {
			t.Fatal(err)
		}
		if _, err := rw.AcquireRW(ctx, req("r2"), driver.Shared); err != nil {
			t.Fatalf("a reader after the intent was withdrawn: %v", err)
		}
		for _, tok := range []string{"r", "r2"} {
			if err := rw.ReleaseRW(ctx, name, tok); err != nil {
				t.Fatal(err)
			}
		}
		n := rwNames(name)
		for _, gone := range []string{n[0], n[1], n[2]} {
			if ttl := pttl(t, s.Addr(), gone); ttl != -2 {
				t.Errorf("%s after release: PTTL %d, want gone", gone, ttl)
			}
		}
		if ttl := pttl(t, s.Addr(), n[3]); ttl <= 0 || ttl > int64((counterLinger+2*time.Minute)/time.Millisecond) {
			t.Errorf("fence counter: PTTL %d, want expiring within the lease and a minute", ttl)
		}
	})
}

// TestRWLockIntentLapses leaves a writer's intent behind: it keeps readers
// out, and the intents' key expires with it, after driver.WriteIntentTTL.
func TestRWLockIntentLapses(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		rw := b.(driver.RWLocks)
		name := "rw-lapse/" + t.Name()
		hold := driver.AcquireRequest{Key: name, Token: "w", TTL: time.Minute}
		if _, err := rw.AcquireRW(ctx, hold, driver.Exclusive); err != nil {
			t.Fatal(err)
		}
		gone := driver.AcquireRequest{Key: name, Token: "gone", TTL: time.Minute, Intent: "intent-gone"}
		if _, err := rw.AcquireRW(ctx, gone, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a second writer: %v", err)
		}
		if ttl := pttl(t, s.Addr(), rwNames(name)[2]); ttl <= 0 || ttl > driver.WriteIntentTTL.Milliseconds() {
			t.Fatalf("intents: PTTL %d, want within %v", ttl, driver.WriteIntentTTL)
		}
		if err := rw.ReleaseRW(ctx, name, "w"); err != nil {
			t.Fatal(err)
		}
		reader := driver.AcquireRequest{Key: name, Token: "r", TTL: time.Minute}
		if _, err := rw.AcquireRW(ctx, reader, driver.Shared); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("a reader while the intent lives: %v, want ErrNotAcquired", err)
		}
		eventually(t, "the intent lapsed", func() error {
			_, err := rw.AcquireRW(ctx, reader, driver.Shared)
			return err
		})
		if ttl := pttl(t, s.Addr(), rwNames(name)[2]); ttl != -2 {
			t.Errorf("intents after the lapse: PTTL %d, want gone", ttl)
		}
	})
}

// TestRWLockWatchNotices watches a read-write lock from one backend while
// another uses it: a release and a withdrawn intent each wake the watcher
// by a notice, a refused attempt that records an intent does not, and stop
// takes the watcher's entry out of Redis.
func TestRWLockWatchNotices(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			watcher, holder := a.new(t, s.Addr()), a.new(t, s.Addr())
			defer watcher.Close()
			defer holder.Close()
			name := "rw-watch/" + a.name
			rw := holder.(driver.RWLocks)
			req := driver.AcquireRequest{Key: name, Token: "held", TTL: time.Minute}
			if _, err := rw.AcquireRW(ctx, req, driver.Shared); err != nil {
				t.Fatal(err)
			}
			wake, stop, err := watcher.(driver.RWLocks).WatchRW(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if !awaitWake(wake, 5*time.Second) {
				t.Fatal("no wake when the subscription was confirmed")
			}
			w := driver.AcquireRequest{Key: name, Token: "w", TTL: time.Minute, Intent: "intent-w"}
			if _, err := rw.AcquireRW(ctx, w, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("a writer while a reader holds: %v", err)
			}
			if awaitWake(wake, 200*time.Millisecond) {
				t.Fatal("woken by a refused attempt")
			}
			if err := rw.WithdrawIntent(ctx, name, "intent-w"); err != nil {
				t.Fatal(err)
			}
			if !awaitWake(wake, 2*time.Second) {
				t.Fatal("no notice of the withdrawn intent within 2s")
			}
			if err := rw.WithdrawIntent(ctx, name, "intent-w"); err != nil {
				t.Fatal(err)
			}
			if awaitWake(wake, 200*time.Millisecond) {
				t.Fatal("woken by withdrawing an intent that was not there")
			}
			if err := rw.ReleaseRW(ctx, name, "held"); err != nil {
				t.Fatal(err)
			}
			if !awaitWake(wake, 2*time.Second) {
				t.Fatal("no notice of the release within 2s")
			}
			watchers := rwNames(name)[4]
			if n := rawCommand(t, []string{s.Addr()}, "ZCARD", watchers); n != "1" {
				t.Fatalf("%s watchers entered, want 1", n)
			}
			stop()
			eventually(t, "the watcher's entry taken out after stop", func() error {
				if n := rawCommand(t, []string{s.Addr()}, "ZCARD", watchers); n != "0" {
					return errors.New(n + " watchers left")
				}
				return nil
			})
		})
	}
}

// TestRWLockDowngrade downgrades a writer's hold while another backend
// watches the lock: the hold keeps its fence, metadata and expiry (the
// holders' key its PTTL), the watcher is woken by a notice, a reader may
// join at once, and a second downgrade neither changes nor wakes anything.
// A hold that expired or never was fails with ErrNotHeld, and bad input
// with ErrInvalidOption or ErrInvalidKey.
func TestRWLockDowngrade(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			watcher, holder := a.new(t, s.Addr()), a.new(t, s.Addr())
			defer watcher.Close()
			defer holder.Close()
			name := "rw-downgrade/" + a.name
			rw, d := holder.(driver.RWLocks), holder.(driver.RWDowngrader)
			w, err := rw.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: "w", TTL: time.Minute, Meta: driver.Meta{Owner: "o"}}, driver.Exclusive)
			if err != nil {
				t.Fatal(err)
			}
			wake, stop, err := watcher.(driver.RWLocks).WatchRW(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if !awaitWake(wake, 5*time.Second) {
				t.Fatal("no wake when the subscription was confirmed")
			}
			holders := rwNames(name)[1]
			before := pttl(t, s.Addr(), holders)
			if err := d.DowngradeRW(ctx, name, "w"); err != nil {
				t.Fatal(err)
			}
			if !awaitWake(wake, 2*time.Second) {
				t.Fatal("no notice of the downgrade within 2s")
			}
			if after := pttl(t, s.Addr(), holders); after <= 0 || after > before {
				t.Errorf("holders after the downgrade: PTTL %d, want at most %d", after, before)
			}
			mode, held, _, err := rw.InspectRW(ctx, name)
			if err != nil || mode != driver.Shared || len(held) != 1 || held[0].Fence != w.Fence ||
				held[0].Meta.Owner != "o" || held[0].TTL <= 50*time.Second {
				t.Fatalf("inspect after the downgrade: %v, %+v, %v; want the writer's hold, shared", mode, held, err)
			}
			if err := d.DowngradeRW(ctx, name, "w"); err != nil {
				t.Fatalf("a second downgrade: %v", err)
			}
			if awaitWake(wake, 200*time.Millisecond) {
				t.Fatal("woken by downgrading a shared hold")
			}
			r, err := rw.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: "r", TTL: time.Minute}, driver.Shared)
			if err != nil || r.Fence <= w.Fence {
				t.Fatalf("a reader after the downgrade: %+v, %v; want a fence above %d", r, err, w.Fence)
			}
			if _, err := rw.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: "w2", TTL: time.Minute}, driver.Exclusive); !errors.Is(err, driver.ErrNotAcquired) {
				t.Fatalf("a writer beside the downgraded hold: %v, want ErrNotAcquired", err)
			}
			for _, tok := range []string{"w", "r"} {
				if err := rw.ReleaseRW(ctx, name, tok); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.DowngradeRW(ctx, name, "w"); !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("downgrade of a released hold: %v, want ErrNotHeld", err)
			}
			short := driver.AcquireRequest{Key: name, Token: "short", TTL: 50 * time.Millisecond}
			if _, err := rw.AcquireRW(ctx, short, driver.Exclusive); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			if err := d.DowngradeRW(ctx, name, "short"); !errors.Is(err, driver.ErrNotHeld) {
				t.Errorf("downgrade of an expired hold: %v, want ErrNotHeld", err)
			}
			if err := d.DowngradeRW(ctx, name, "a\nb"); !errors.Is(err, driver.ErrInvalidOption) {
				t.Errorf("token with a newline: %v, want ErrInvalidOption", err)
			}
			if err := d.DowngradeRW(ctx, "", "w"); !errors.Is(err, driver.ErrInvalidKey) {
				t.Errorf("no name: %v, want ErrInvalidKey", err)
			}
		})
	}
}

// TestRWLockAfterClose calls every read-write lock method after Close:
// each must fail at once with ErrClosed.
func TestRWLockAfterClose(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			b := a.new(t, s.Addr())
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			rw := b.(driver.RWLocks)
			req := driver.AcquireRequest{Key: "closed", Token: "t", TTL: time.Minute}
			for op, call := range map[string]func() error{
				"acquire":   func() error { _, err := rw.AcquireRW(ctx, req, driver.Exclusive); return err },
				"renew":     func() error { return rw.RenewRW(ctx, "closed", "t", time.Minute) },
				"release":   func() error { return rw.ReleaseRW(ctx, "closed", "t") },
				"withdraw":  func() error { return rw.WithdrawIntent(ctx, "closed", "i") },
				"downgrade": func() error { return b.(driver.RWDowngrader).DowngradeRW(ctx, "closed", "t") },
				"inspect":   func() error { _, _, _, err := rw.InspectRW(ctx, "closed"); return err },
				"watch":     func() error { _, _, err := rw.WatchRW(ctx, "closed"); return err },
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
