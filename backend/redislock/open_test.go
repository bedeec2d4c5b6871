package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
)

// TestUnreachableStoreFailsPromptly opens every URL form, and New on a
// go-redis client, against an address where nothing listens, with a context
// that never ends: each must fail at once and name the dial error.
func TestUnreachableStoreFailsPromptly(t *testing.T) {
	addr := fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t)) // free again once FreePort returns
	opens := map[string]func() error{
		"New(go-redis)": func() error {
			client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			defer client.Close()
			_, err := redislock.New(client)
			return err
		},
		"New(go-redis default options)": func() error {
			client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer client.Close()
			_, err := redislock.New(client)
			return err
		},
	}
	for _, u := range []string{
		"redis://" + addr + "/0",
		"rediss://" + addr,
		"redis-cluster://" + addr,
		"redis-sentinel://" + addr + "/mymaster",
	} {
		opens["Open("+u+")"] = func() error {
			b, err := redislock.Open(context.Background(), u)
			if err == nil {
				b.Close()
			}
			return err
		}
	}
	for name, open := range opens {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			done := make(chan error, 1)
			go func() { done <- open() }()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "connection refused") {
					t.Fatalf("got %v, want an error naming the refused connection", err)
				}
				if !strings.Contains(err.Error(), addr) {
					t.Errorf("error %q does not name the address %s", err, addr)
				}
				t.Logf("failed in %v: %v", time.Since(start).Round(time.Millisecond), err)
			case <-time.After(3 * time.Second):
				t.Fatal("still connecting after 3s")
			}
		})
	}
}

// TestRequestTimeout blackholes the link to Redis: every request, sent with
// a context that never ends, must return within the request timeout.
func TestRequestTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	s := testserver.Redis(t)
	backends := map[string]func(t *testing.T, addr string) driver.Backend{
		"rueidis": func(t *testing.T, addr string) driver.Backend {
			return openURL(t, "redis://"+addr+"/0?request_timeout="+timeout.String())
		},
		"go-redis": func(t *testing.T, addr string) driver.Backend {
			client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			b, err := redislock.New(client, redislock.WithRequestTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			return ownedBackend{b, client}
		},
		"go-redis-default-options": func(t *testing.T, addr string) driver.Backend {
			client := redis.NewClient(&redis.Options{Addr: addr})
			b, err := redislock.New(client, redislock.WithRequestTimeout(timeout))
			if err != nil {
				t.Fatal(err)
			}
			return ownedBackend{b, client}
		},
	}
	for name, newBackend := range backends {
		t.Run(name, func(t *testing.T) {
			p := faultproxy.Start(t, s.Addr())
			b := newBackend(t, p.Addr())
			defer b.Close()
			key := "timeout/" + t.Name()
			p.Blackhole()
			defer p.Restore()
			calls := map[string]func(ctx context.Context) error{
				"acquire": func(ctx context.Context) error {
					_, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "tok", TTL: time.Minute})
					return err
				},
				"renew":   func(ctx context.Context) error { return b.Renew(ctx, key, "tok", time.Minute) },
				"release": func(ctx context.Context) error { return b.Release(ctx, key, "tok") },
				"inspect": func(ctx context.Context) error { _, err := b.Inspect(ctx, key); return err },
			}
			for op, call := range calls {
				start := time.Now()
				done := make(chan error, 1)
				go func() { done <- call(context.Background()) }()
				select {
				case err := <-done:
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("%s through a blackhole: got %v, want context.DeadlineExceeded", op, err)
					}
					if d := time.Since(start); d > timeout+500*time.Millisecond {
						t.Errorf("%s took %v, request timeout %v", op, d, timeout)
					}
				case <-time.After(5 * time.Second):
					t.Fatalf("%s through a blackhole still waiting after 5s", op)
				}
			}
		})
	}
}

// TestClosedBackendReturnsErrClosed calls every method after the backend's
// own Close, and after the client under it was closed: each must return at
// once with an error matching driver.ErrClosed.
func TestClosedBackendReturnsErrClosed(t *testing.T) {
	s := testserver.Redis(t)
	type closer struct {
		name string
		open func(t *testing.T) (driver.Backend, func())
	}
	closers := []closer{
		{"rueidis/Close", func(t *testing.T) (driver.Backend, func()) {
			b := openURL(t, "redis://"+s.Addr())
			return b, func() { b.Close() }
		}},
		{"go-redis/Close", func(t *testing.T) (driver.Backend, func()) {
			b := newGoRedis(t, redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true}))
			return b, func() { b.Close() }
		}},
		{"rueidis/client closed", func(t *testing.T) (driver.Backend, func()) {
			client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			b, err := redislock.NewRueidis(client)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b, client.Close
		}},
		{"go-redis/client closed", func(t *testing.T) (driver.Backend, func()) {
			client := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
			b, err := redislock.New(client)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b, func() { client.Close() }
		}},
	}
	for _, c := range closers {
		t.Run(c.name, func(t *testing.T) {
			ctx := testContext(t)
			b, closeIt := c.open(t)
			key := "closed/" + t.Name()
			req := driver.AcquireRequest{Key: key, Token: "tok", TTL: time.Minute}
			if _, err := b.Acquire(ctx, req); err != nil {
				t.Fatal(err)
			}
			closeIt()
			calls := map[string]func() error{
				"acquire": func() error { _, err := b.Acquire(ctx, req); return err },
				"renew":   func() error { return b.Renew(ctx, key, "tok", time.Minute) },
				"release": func() error { return b.Release(ctx, key, "tok") },
				"inspect": func() error { _, err := b.Inspect(ctx, key); return err },
				"list":    func() error { _, err := b.(driver.Lister).List(ctx, "closed/"); return err },
				"list page": func() error {
					_, err := b.(driver.PageLister).ListPage(ctx, "closed/", "", 1)
					return err
				},
				"handoff": func() error {
					_, err := b.(driver.Handoff).Handoff(ctx, key, "tok", driver.AcquireRequest{Key: key, Token: "next", TTL: time.Minute})
					return err
				},
			}
			if fr, ok := b.(driver.ForceReleaser); ok {
				calls["force release"] = func() error { _, err := fr.ForceRelease(ctx, key, driver.ForceOptions{}); return err }
			} else {
				t.Error("the backend does not implement driver.ForceReleaser")
			}
			for op, call := range calls {
				start := time.Now()
				if err := call(); !errors.Is(err, driver.ErrClosed) {
					t.Errorf("%s: got %v, want ErrClosed", op, err)
				}
				if d := time.Since(start); d > time.Second {
					t.Errorf("%s took %v", op, d)
				}
			}
		})
	}
}
