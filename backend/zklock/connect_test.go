package zklock_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/driver"
)

// TestOpenUnreachable opens zk:// URLs whose address has no listener, with
// context.Background(): each must fail within its connect timeout, name the
// refused connection, and leave no goroutine behind.
func TestOpenUnreachable(t *testing.T) {
	for _, tc := range []struct {
		url    string
		within time.Duration
	}{
		{"zk://127.0.0.1:1?dial_timeout=1s", 3 * time.Second},
		{"zk://127.0.0.1:1", zklock.DefaultDialTimeout + 3*time.Second},
	} {
		t.Run(tc.url, func(t *testing.T) {
			ignore := goleak.IgnoreCurrent()
			type result struct {
				c   *distlock.Client
				err error
			}
			ch := make(chan result, 1)
			start := time.Now()
			go func() {
				c, err := distlock.Open(context.Background(), tc.url)
				ch <- result{c, err}
			}()
			var r result
			select {
			case r = <-ch:
			case <-time.After(tc.within):
				t.Fatalf("Open(%q) did not return within %v", tc.url, tc.within)
			}
			if r.err == nil {
				_ = r.c.Close()
				t.Fatalf("Open(%q) succeeded", tc.url)
			}
			if !errors.Is(r.err, syscall.ECONNREFUSED) || !strings.Contains(r.err.Error(), "connection refused") {
				t.Fatalf("Open(%q) = %v, want an error naming the refused connection", tc.url, r.err)
			}
			t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), r.err)
			goleak.VerifyNone(t, ignore)
		})
	}
}

// TestInvalidOptions checks that every bad option value fails New, Dial and
// Open with ErrInvalidOption naming the option, before any connection: Dial
// is given an address with no listener, which would otherwise take its
// connect timeout to fail.
func TestInvalidOptions(t *testing.T) {
	opts := map[string]zklock.Option{
		"WithRoot":                  zklock.WithRoot("/"),
		"WithRoot(dots)":            zklock.WithRoot("/a/../b"),
		"WithRoot(empty)":           zklock.WithRoot("a//b"),
		"WithRoot(reserved)":        zklock.WithRoot("/zookeeper/x"),
		"WithRoot(control)":         zklock.WithRoot("/a\x01b"),
		"WithSessionTimeout":        zklock.WithSessionTimeout(0),
		"WithSessionTimeout(short)": zklock.WithSessionTimeout(time.Millisecond),
		"WithSessionTimeout(long)":  zklock.WithSessionTimeout(48 * time.Hour),
		"WithDialTimeout":           zklock.WithDialTimeout(0),
		"WithDialTimeout(neg)":      zklock.WithDialTimeout(-time.Second),
		"WithRequestTimeout":        zklock.WithRequestTimeout(0),
		"WithRequestTimeout(long)":  zklock.WithRequestTimeout(2 * time.Hour),
	}
	conn, events, err := zk.Connect([]string{"127.0.0.1:1"}, 4*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		for range events {
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, o := range opts {
		option, _, _ := strings.Cut(name, "(")
		start := time.Now()
		_, errNew := zklock.New(conn, events, o)
		_, errDial := zklock.Dial(ctx, []string{"127.0.0.1:1"}, o)
		for ctor, err := range map[string]error{"New": errNew, "Dial": errDial} {
			if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), option) {
				t.Errorf("%s with %s: got %v, want ErrInvalidOption naming %s", ctor, name, err, option)
			}
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: rejected after %v; it must not connect first", name, took)
		}
	}
	if _, err := zklock.New(nil, events); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("New without a connection: got %v, want ErrInvalidOption", err)
	}
	if _, err := zklock.New(conn, nil); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("New without the event channel: got %v, want ErrInvalidOption", err)
	}
	if _, err := zklock.Dial(ctx, nil); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("Dial without a server: got %v, want ErrInvalidOption", err)
	}
	for _, u := range []string{
		"zk:///root",
		"zk://127.0.0.1:1/r?session_timeout=soon",
		"zk://127.0.0.1:1/r?dial_timeout=0s",
		"zk://127.0.0.1:1/r?request_timeout=-1s",
		"zk://127.0.0.1:1/r?conect_timeout=1s",
		"zk://127.0.0.1:1/zookeeper",
	} {
		start := time.Now()
		if _, err := distlock.Open(ctx, u); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Open(%q): got %v, want ErrInvalidOption", u, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("Open(%q): rejected after %v; it must not connect first", u, took)
		}
	}
}

// TestNewOverOwnConnection builds a backend over a connection the test
// made: locks work, the root is created on first use, Close deletes the
// nodes of locks still held but leaves the connection open, and once the
// connection is closed the backend's calls fail with ErrClosed and its
// holds are lost.
func TestNewOverOwnConnection(t *testing.T) {
	srv := zkServer(t)
	adm := admin(t, srv.Addr())
	root := uniqueRoot(t) + "/nested"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newBackend := func() (*zk.Conn, *zklock.Backend) {
		conn, events, err := zk.Connect([]string{srv.Addr()}, 4*time.Second, zk.WithLogger(quiet{}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		b, err := zklock.New(conn, events, zklock.WithRoot(root), zklock.WithSessionTimeout(4*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return conn, b
	}

	conn, b := newBackend()
	const token = "0123456789abcdef0123456789abcdef"
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "own", Token: token, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if q := queue(t, adm, root, "own"); len(q) != 1 {
		t.Fatalf("queue %q, want the holder", q)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if q := queue(t, adm, root, "own"); len(q) != 0 {
		t.Fatalf("after Close the queue is %q, want the held node deleted", q)
	}
	if _, _, err := conn.Exists("/"); err != nil {
		t.Fatalf("Close closed the caller's connection: %v", err)
	}
	if err := b.Release(ctx, "own", token); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Release after Close: got %v, want ErrClosed", err)
	}

	conn2, b2 := newBackend()
	c2 := distlock.New(b2)
	defer c2.Close()
	l2 := mustLock(t, ctx, c2, "own")
	conn2.Close()
	waitDone(t, l2, 5*time.Second, "a hold whose connection was closed")
	// The backend saw the connection end before it reported the hold lost.
	if _, err := b2.Inspect(ctx, "own"); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Inspect after the connection was closed: got %v, want ErrClosed", err)
	}
}

// TestCallsAfterClose closes backends, made by Dial and by New, and checks
// that every call then fails at once with ErrClosed.
func TestCallsAfterClose(t *testing.T) {
	srv := zkServer(t)
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, events, err := zk.Connect([]string{srv.Addr()}, 4*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fromNew, err := zklock.New(conn, events, zklock.WithRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*zklock.Backend{"Dial": dial(t, srv.Addr(), root), "New": fromNew} {
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "closed", Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		req := driver.AcquireRequest{Key: "closed", Token: "fedcba9876543210fedcba9876543210", TTL: time.Minute}
		calls := map[string]func() error{
			"Acquire":      func() error { _, err := b.Acquire(ctx, req); return err },
			"AcquireWait":  func() error { _, err := b.AcquireWait(ctx, req); return err },
			"Renew":        func() error { return b.Renew(ctx, req.Key, req.Token, time.Minute) },
			"Release":      func() error { return b.Release(ctx, req.Key, req.Token) },
			"Inspect":      func() error { _, err := b.Inspect(ctx, req.Key); return err },
			"List":         func() error { _, err := b.List(ctx, ""); return err },
			"ListPage":     func() error { _, err := b.ListPage(ctx, "", "", 1); return err },
			"ForceRelease": func() error { _, err := b.ForceRelease(ctx, req.Key, driver.ForceOptions{}); return err },
		}
		for call, f := range calls {
			start := time.Now()
			if err := f(); !errors.Is(err, driver.ErrClosed) {
				t.Errorf("%s: %s after Close: got %v, want ErrClosed", name, call, err)
			}
			if took := time.Since(start); took > 100*time.Millisecond {
				t.Errorf("%s: %s after Close took %v", name, call, took)
			}
		}
	}
}

// TestCloseEndsWait closes backends, made by Dial and by New, while one of
// their waits is queued: the wait must end at once with ErrClosed, and its
// node must be gone.
func TestCloseEndsWait(t *testing.T) {
	srv := zkServer(t)
	adm := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := distlock.New(dial(t, srv.Addr(), root))
	defer holder.Close()
	conn, events, err := zk.Connect([]string{srv.Addr()}, 4*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fromNew, err := zklock.New(conn, events, zklock.WithRoot(root))
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]*zklock.Backend{"Dial": dial(t, srv.Addr(), root), "New": fromNew} {
		key := "close-wait-" + name
		l := mustLock(t, ctx, holder, key)
		done := make(chan error, 1)
		go func() {
			_, err := b.AcquireWait(ctx, driver.AcquireRequest{Key: key, Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute})
			done <- err
		}()
		awaitQueue(t, adm, root, key, name+": the waiter queues", queueLen(2))
		start := time.Now()
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if !errors.Is(err, driver.ErrClosed) {
				t.Errorf("%s: wait ended by Close with %v, want ErrClosed", name, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: the wait did not end within 2s of Close", name)
		}
		t.Logf("%s: wait ended %v after Close began", name, time.Since(start).Round(time.Millisecond))
		awaitQueue(t, adm, root, key, name+": the waiter's node goes", queueLen(1))
		_ = l.Release(ctx)
	}
}

func waitDone(t *testing.T, l *distlock.Lock, within time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("%s: Done not closed within %v", what, within)
	}
}
