package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// calls are every backend call, as the client makes them.
func calls(b *etcdlock.Backend, key, token string) map[string]func(context.Context) error {
	req := driver.AcquireRequest{Key: key, Token: token, TTL: 5 * time.Second}
	return map[string]func(context.Context) error{
		"Acquire":      func(ctx context.Context) error { _, err := b.Acquire(ctx, req); return err },
		"AcquireWait":  func(ctx context.Context) error { _, err := b.AcquireWait(ctx, req); return err },
		"Renew":        func(ctx context.Context) error { return b.Renew(ctx, key, token, time.Second) },
		"Release":      func(ctx context.Context) error { return b.Release(ctx, key, token) },
		"Inspect":      func(ctx context.Context) error { _, err := b.Inspect(ctx, key); return err },
		"List":         func(ctx context.Context) error { _, err := b.List(ctx, key); return err },
		"ForceRelease": func(ctx context.Context) error { _, err := b.ForceRelease(ctx, key, driver.ForceOptions{}); return err },
	}
}

// wantClosed checks that every call returns an error matching ErrClosed
// within a second, which leaves naming the key to the client.
func wantClosed(t *testing.T, b *etcdlock.Backend, key, token string) {
	t.Helper()
	for name, call := range calls(b, key, token) {
		err := within(t, time.Second, func() error { return call(context.Background()) })
		if !errors.Is(err, driver.ErrClosed) || strings.Contains(err.Error(), key) {
			t.Errorf("%s: got %v, want ErrClosed, not naming %q", name, err, key)
		}
	}
}

// TestCallsAfterClose holds a lock, closes the backend, and checks that every
// call, Release of the held lock included, returns ErrClosed at once.
func TestCallsAfterClose(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	b := dial(t, eps, uniquePrefix(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "held", Token: "t1", TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, b, "held", "t1")
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestCallsAfterClientClosed closes the etcd client under a backend built by
// New: every call returns ErrClosed.
func TestCallsAfterClientClosed(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli := admin(t, eps)
	b, err := etcdlock.New(cli, etcdlock.WithPrefix(uniquePrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "held", Token: "t1", TTL: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := cli.Close(); err != nil {
		t.Fatal(err)
	}
	wantClosed(t, b, "held", "t1")
}

// TestCloseEndsWait closes a backend while one of its calls waits in the
// queue: the wait returns ErrClosed at once and leaves no entry behind.
func TestCloseEndsWait(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli, prefix := admin(t, eps), uniquePrefix(t)
	holder, waiter := dial(t, eps, prefix), dial(t, eps, prefix)
	defer holder.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "closing"
	if _, err := holder.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "h", TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := waiter.AcquireWait(ctx, driver.AcquireRequest{Key: key, Token: "w", TTL: 10 * time.Second})
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); len(entries(t, cli, prefix, key)) < 2; {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never queued")
		}
		select {
		case err := <-done:
			t.Fatalf("the wait returned before Close: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	start := time.Now()
	if err := within(t, 5*time.Second, waiter.Close); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, driver.ErrClosed) {
			t.Fatalf("wait ended with %v, want ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the wait went on after Close returned")
	}
	t.Logf("Close ended the wait in %v", time.Since(start))
	if q := entries(t, cli, prefix, key); len(q) != 1 {
		t.Fatalf("after Close the queue is %q, want only the holder", q)
	}
}
