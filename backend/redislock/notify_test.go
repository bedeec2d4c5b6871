package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

var subCount = regexp.MustCompile(`\bsub=(\d+)`)

// subscribers returns the channel count of every connection with
// subscriptions, from CLIENT LIST.
func subscribers(t *testing.T, addr string) []int {
	t.Helper()
	var subs []int
	for _, m := range subCount.FindAllStringSubmatch(rawCommand(t, []string{addr}, "CLIENT", "LIST"), -1) {
		if n, _ := strconv.Atoi(m[1]); n > 0 {
			subs = append(subs, n)
		}
	}
	return subs
}

// eventually retries check every 20ms for up to 10s.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOneSubscriptionPerBackend has 20 waiters on 5 keys in one backend,
// whose holds are another backend's: each backend has one subscription
// connection with two channels, its own (woken by releases) and the lost
// notices', whatever the number of waiters and holds; the channels stay
// until Close.
func TestOneSubscriptionPerBackend(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			holder, waiters := newClient(t, a.new(t, s.Addr())), newClient(t, a.new(t, s.Addr()))
			const nkeys, perKey = 5, 4
			held := make([]*distlock.Lock, nkeys)
			for i := range held {
				l, err := holder.TryLock(ctx, fmt.Sprintf("shared/%s/%d", t.Name(), i))
				if err != nil {
					t.Fatal(err)
				}
				held[i] = l
			}
			results := make(chan error, nkeys*perKey)
			for i := range nkeys * perKey {
				go func() {
					l, err := waiters.Lock(ctx, held[i%nkeys].Key(), distlock.WithWait(20*time.Second))
					if err == nil {
						err = l.Release(ctx)
					}
					results <- err
				}()
			}
			eventually(t, "one subscription connection with two channels per backend", func() error {
				if subs := subscribers(t, s.Addr()); !slices.Equal(subs, []int{2, 2}) {
					return fmt.Errorf("subscribed connections and their channel counts: %v, want [2 2]", subs)
				}
				return nil
			})
			for _, l := range held {
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for range nkeys * perKey {
				if err := <-results; err != nil {
					t.Fatal(err)
				}
			}
			if subs := subscribers(t, s.Addr()); !slices.Equal(subs, []int{2, 2}) {
				t.Fatalf("once nobody waits or holds: subscribed connections %v, want [2 2] until Close", subs)
			}
			if err := waiters.Close(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "the holder's subscription alone after the waiters' Close", func() error {
				if subs := subscribers(t, s.Addr()); !slices.Equal(subs, []int{2}) {
					return fmt.Errorf("subscribed connections: %v, want [2]", subs)
				}
				return nil
			})
			if err := holder.Close(); err != nil {
				t.Fatal(err)
			}
			eventually(t, "no subscription after Close", func() error {
				if subs := subscribers(t, s.Addr()); len(subs) != 0 {
					return fmt.Errorf("subscribed connections: %v", subs)
				}
				return nil
			})
		})
	}
}

// TestHandoffsLeaveRoomForOtherClients keeps one client's goroutines handing
// a key to each other without pause; a waiter of another client, which only
// a free key lets in, must still get it within a few seconds, and the key
// must go to one holder at a time throughout.
func TestHandoffsLeaveRoomForOtherClients(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			busy, other := newClient(t, a.new(t, s.Addr())), newClient(t, a.new(t, s.Addr()))
			key := "handoff/" + t.Name()
			var holders atomic.Int32
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; n < 100_000; n++ { // bounded; stop ends it long before
						select {
						case <-stop:
							return
						default:
						}
						l, err := busy.Lock(ctx, key, distlock.WithWait(10*time.Second))
						if err != nil {
							t.Error(err)
							return
						}
						if holders.Add(1) != 1 {
							t.Error("two holders at once")
						}
						holders.Add(-1)
						if err := l.Release(ctx); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			time.Sleep(100 * time.Millisecond) // the busy client's line is full
			start := time.Now()
			l, err := other.Lock(ctx, key, distlock.WithWait(5*time.Second))
			took := time.Since(start)
			if err == nil {
				err = l.Release(ctx)
			}
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("the other client's waiter starved: %v", err)
			}
			t.Logf("the other client got the key after %v", took)
		})
	}
}

var publishCalls = regexp.MustCompile(`cmdstat_publish:calls=(\d+)`)

// publishes returns how many PUBLISH commands the server ran since its
// statistics were last reset.
func publishes(t *testing.T, addr string) int {
	t.Helper()
	m := publishCalls.FindStringSubmatch(rawCommand(t, []string{addr}, "INFO", "commandstats"))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestReleaseNoticeOnlyWhenQueued checks that a release publishes nothing
// when no waiter queued for the key while it was held, and publishes exactly
// once when one did, waking that waiter.
func TestReleaseNoticeOnlyWhenQueued(t *testing.T) {
	s := testserver.Redis(t)
	for _, a := range adapters[:2] {
		t.Run(a.name, func(t *testing.T) {
			ctx := testContext(t)
			holder, waiter := newClient(t, a.new(t, s.Addr())), newClient(t, a.new(t, s.Addr()))
			rawCommand(t, []string{s.Addr()}, "CONFIG", "RESETSTAT")
			for i := range 3 {
				l, err := holder.Lock(ctx, fmt.Sprintf("alone/%s/%d", t.Name(), i))
				if err != nil {
					t.Fatal(err)
				}
				if err := l.Renew(ctx); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n := publishes(t, s.Addr()); n != 0 {
				t.Fatalf("releases nobody waited for published %d notices, want 0", n)
			}

			key := "waited/" + t.Name()
			held, err := holder.Lock(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := waiter.Lock(ctx, key, distlock.WithWait(20*time.Second))
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
			eventually(t, "the queued waiter marks the key", func() error {
				if v := rawCommand(t, []string{s.Addr()}, "GET", lockName(key)); !strings.HasSuffix(v, "\n") {
					return fmt.Errorf("lock value %q has no waiters' mark", v)
				}
				return nil
			})
			if err := held.Renew(ctx); err != nil { // keeps the mark
				t.Fatal(err)
			}
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			if n := publishes(t, s.Addr()); n != 1 {
				t.Fatalf("%d notices published for one waited-for release, want 1", n)
			}
		})
	}
}

// TestHandoffKeepsWaitersMark hands a key that another client's waiter is
// queued for to a new holder: the mark must pass with it, so that the new
// holder's release still passes the key to the waiter; a key nobody queued
// for must be handed unmarked.
func TestHandoffKeepsWaitersMark(t *testing.T) {
	s := testserver.Redis(t)
	onEachClient(t, s, func(t *testing.T, ctx context.Context, b driver.Backend) {
		for _, queued := range []bool{false, true} {
			key := fmt.Sprintf("handoff-mark/%s/%v", t.Name(), queued)
			first := driver.AcquireRequest{Key: key, Token: "first", TTL: time.Minute}
			if _, err := b.Acquire(ctx, first); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			if queued {
				waiter := newClient(t, openURL(t, "redis://"+s.Addr()))
				go func() {
					l, err := waiter.Lock(ctx, key, distlock.WithWait(20*time.Second))
					if err == nil {
						err = l.Release(ctx)
					}
					waited <- err
				}()
				eventually(t, "the queued waiter marks the key", func() error {
					if v := rawCommand(t, []string{s.Addr()}, "GET", lockName(key)); v != "first\n" {
						return fmt.Errorf("lock value %q, want the waiters' mark", v)
					}
					return nil
				})
			}
			if _, err := b.(driver.Handoff).Handoff(ctx, key, "first", driver.AcquireRequest{Key: key, Token: "second", TTL: time.Minute}); err != nil {
				t.Fatal(err)
			}
			want := "second"
			if queued {
				want += "\n"
			}
			if v := rawCommand(t, []string{s.Addr()}, "GET", lockName(key)); v != want {
				t.Fatalf("value after the handoff %q, want %q", v, want)
			}
			rawCommand(t, []string{s.Addr()}, "CONFIG", "RESETSTAT")
			if err := b.Release(ctx, key, "second"); err != nil {
				t.Fatal(err)
			}
			if queued {
				if err := <-waited; err != nil {
					t.Fatalf("the waiter: %v", err)
				}
			}
			if n, want := publishes(t, s.Addr()), map[bool]int{false: 0, true: 1}[queued]; n != want {
				t.Fatalf("release after the handoff published %d notices, want %d", n, want)
			}
		}
	})
}

// TestWatchNotices watches a lock from one backend while others hold it:
// a release through a backend built WithWatchedReleases, and a force
// release, must each wake the watcher by a notice on the watcher's backend
// channel (nothing else wakes it within the wait); a release through a
// backend without the option must not, as its doc says; and stop must take
// the watcher's entry out of Redis.
func TestWatchNotices(t *testing.T) {
	s := testserver.Redis(t)
	libs := map[string]func(opts ...redislock.Option) driver.Backend{
		"rueidis": func(opts ...redislock.Option) driver.Backend { return openURL(t, "redis://"+s.Addr(), opts...) },
		"go-redis": func(opts ...redislock.Option) driver.Backend {
			return newGoRedis(t, redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true}), opts...)
		},
	}
	for name, open := range libs {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			watcher, watched, plain := open(), open(redislock.WithWatchedReleases()), open()
			defer watcher.Close()
			defer watched.Close()
			defer plain.Close()
			key := "watch/" + name
			take := func(b driver.Backend, token string) {
				t.Helper()
				if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: token, TTL: time.Minute}); err != nil {
					t.Fatal(err)
				}
			}
			release := func(b driver.Backend, token string) {
				t.Helper()
				if err := b.Release(ctx, key, token); err != nil {
					t.Fatal(err)
				}
			}
			take(watched, "first")
			wake, stop, err := watcher.(driver.Notifier).Watch(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			if !awaitWake(wake, 5*time.Second) {
				t.Fatal("no wake when the subscription was confirmed")
			}
			if awaitWake(wake, 100*time.Millisecond) {
				t.Fatal("woken while the key is held")
			}
			release(watched, "first")
			if !awaitWake(wake, 2*time.Second) {
				t.Fatal("no notice of a watched release within 2s")
			}
			take(plain, "second")
			release(plain, "second")
			if awaitWake(wake, 200*time.Millisecond) {
				t.Fatal("woken by the release of a backend without WithWatchedReleases")
			}
			take(plain, "third")
			if _, err := plain.(driver.ForceReleaser).ForceRelease(ctx, key, driver.ForceOptions{}); err != nil {
				t.Fatal(err)
			}
			if !awaitWake(wake, 2*time.Second) {
				t.Fatal("no notice of the force release within 2s")
			}
			w := lockName(key) + ":watchers"
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
