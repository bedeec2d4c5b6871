package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

func TestOptionsValidated(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/postgres") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	bad := map[string]pglock.Option{
		"WithKeepalive":       pglock.WithKeepalive(0),
		"WithPoolWait":        pglock.WithPoolWait(-time.Second),
		"WithRequestTimeout":  pglock.WithRequestTimeout(0),
		"WithCleanupInterval": pglock.WithCleanupInterval(-time.Minute),
		"WithCleanupBatch":    pglock.WithCleanupBatch(0),
		"WithRetention":       pglock.WithRetention(-time.Second),
		"WithWatchDelay":      pglock.WithWatchDelay(-time.Millisecond),
	}
	for name, opt := range bad {
		b, err := pglock.New(pool, opt)
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), name) || b != nil {
			t.Errorf("New with a bad %s: %v, %v; want ErrInvalidOption naming it", name, b, err)
		}
	}
	if _, err := pglock.New(pool, pglock.WithKeepalive(pglock.MinKeepalive-1)); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("WithKeepalive under the minimum: %v, want ErrInvalidOption", err)
	}
	if _, err := pglock.New(pool, pglock.WithWatchDelay(pglock.MaxWatchDelay+1)); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("WithWatchDelay over the maximum: %v, want ErrInvalidOption", err)
	}
	if _, err := pglock.New(nil); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
	b, err := pglock.New(pool, pglock.WithKeepalive(pglock.MinKeepalive), pglock.WithCleanupInterval(0), pglock.WithRetention(0),
		pglock.WithWatchDelay(0))
	if err != nil {
		t.Fatalf("New with valid options: %v", err)
	}
	_ = b.Close()
	b, err = pglock.New(pool, pglock.WithWatchDelay(pglock.MaxWatchDelay))
	if err != nil {
		t.Fatalf("New with the longest watch delay: %v", err)
	}
	_ = b.Close()
	for _, q := range []string{"request_timeout=soon", "request_timeout=0s", "request_timeout=-1s", "terminate_on_force_release=maybe"} {
		if _, err := pglock.Open(context.Background(), "postgres://postgres@127.0.0.1:1/postgres?"+q); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Open with %s: %v, want ErrInvalidOption", q, err)
		}
	}
}

// unreachable makes one acquisition through Open(url) with
// context.Background() and returns its error and how long it took; it fails
// the test if the call does not return within limit.
func unreachable(t *testing.T, url string, limit time.Duration) (error, time.Duration) {
	t.Helper()
	c, err := distlock.Open(context.Background(), url)
	if err != nil {
		return err, 0
	}
	defer c.Close()
	type result struct {
		err  error
		took time.Duration
	}
	got := make(chan result, 1)
	go func() {
		start := time.Now()
		l, err := c.TryLock(context.Background(), "pglock/unreachable")
		if err == nil {
			_ = l.Release(context.Background())
		}
		got <- result{err, time.Since(start)}
	}()
	select {
	case r := <-got:
		if r.err == nil {
			t.Fatal("TryLock against an unreachable server succeeded")
		}
		return r.err, r.took
	case <-time.After(limit):
		t.Fatalf("TryLock against %s with context.Background() still waits after %v", url, limit)
		return nil, 0
	}
}

func TestUnreachableServer(t *testing.T) {
	// Nothing listens: the refused dial is named at once.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	err, took := unreachable(t, fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr), 5*time.Second)
	t.Logf("refused after %v: %v", took, err)
	if !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("error %q does not name the refused dial to %s", err, addr)
	}

	// A listener that never answers: the connect timeout ends the wait,
	// 5s by default, or connect_timeout from the URL.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered, until the listener closes
		}
	}()
	url := fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", silent.Addr())
	err, took = unreachable(t, url, 15*time.Second)
	t.Logf("silent server, default connect timeout: failed after %v: %v", took, err)
	if took < pglock.DefaultConnectTimeout*3/4 || !strings.Contains(err.Error(), silent.Addr().String()) {
		t.Fatalf("silent server: %v after %v; want the default connect timeout of %v naming the address", err, took, pglock.DefaultConnectTimeout)
	}
	err, took = unreachable(t, url+"&connect_timeout=1", 5*time.Second)
	t.Logf("silent server, connect_timeout=1: failed after %v: %v", took, err)
	if took > 3*time.Second {
		t.Fatalf("connect_timeout=1 took %v", took)
	}
}

// TestCallsAfterClose checks that every call after Close says the backend
// is closed, whether Open made its pool or the caller did.
func TestCallsAfterClose(t *testing.T) {
	s := testserver.Postgres(t)
	ctx := testContext(t, time.Minute)
	opened, err := pglock.Open(ctx, testserver.PostgresDSN(s))
	if err != nil {
		t.Fatal(err)
	}
	checker := newBackend(t, newPool(t, s, 1))
	defer checker.Close()
	backends := map[string]*pglock.Backend{"Open": opened, "New": newBackend(t, newPool(t, s, 2))}
	for name, b := range backends {
		t.Cleanup(func() { _ = b.Close() }) // also when -run skips the subtest that closes it
		t.Run(name, func(t *testing.T) {
			key := uniqueKey(t)
			req := driver.AcquireRequest{Key: key, Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
			if _, err := b.Acquire(ctx, req); err != nil {
				t.Fatal(err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			calls := map[string]func() error{
				"Acquire":      func() error { _, err := b.Acquire(ctx, req); return err },
				"AcquireWait":  func() error { _, err := b.AcquireWait(ctx, req); return err },
				"Renew":        func() error { return b.Renew(ctx, key, req.Token, time.Minute) },
				"Release":      func() error { return b.Release(ctx, key, req.Token) },
				"Inspect":      func() error { _, err := b.Inspect(ctx, key); return err },
				"List":         func() error { _, err := b.List(ctx, ""); return err },
				"ListPage":     func() error { _, err := b.ListPage(ctx, "", "", 1); return err },
				"ForceRelease": func() error { _, err := b.ForceRelease(ctx, key, driver.ForceOptions{}); return err },
				"Cleanup":      func() error { _, err := b.Cleanup(ctx); return err },
				"Migrate":      func() error { return b.Migrate(ctx) },
			}
			for call, f := range calls {
				start := time.Now()
				if err := f(); !errors.Is(err, driver.ErrClosed) {
					t.Errorf("%s after Close: %v, want ErrClosed", call, err)
				}
				if took := time.Since(start); took > time.Second {
					t.Errorf("%s after Close took %v", call, took)
				}
			}
			if err := b.Close(); err != nil {
				t.Errorf("a second Close: %v", err)
			}
			other := req
			other.Token = "fedcba9876543210fedcba9876543210"
			if _, err := checker.Acquire(ctx, other); err != nil {
				t.Fatalf("the key a closed backend held is not free: %v", err)
			}
			if err := checker.Release(ctx, key, other.Token); err != nil {
				t.Fatal(err)
			}
		})
	}
}
