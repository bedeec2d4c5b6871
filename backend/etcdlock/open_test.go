package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	return fmt.Sprintf("%s:%d", testserver.Host, testserver.FreePort(t))
}

// within runs f in a goroutine and returns its error, failing the test if f
// takes longer than d.
func within(t *testing.T, d time.Duration, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("still running after %v", d)
		return nil
	}
}

// TestOpenUnreachable opens etcd:// at an address where nothing listens,
// with no deadline: Open (or else the first TryLock) must fail within a few
// seconds, naming the refused connection.
func TestOpenUnreachable(t *testing.T) {
	start := time.Now()
	err := within(t, 15*time.Second, func() error {
		c, err := distlock.Open(context.Background(), "etcd://"+deadAddr(t)+"/x")
		if err != nil {
			return err
		}
		defer c.Close()
		l, err := c.TryLock(context.Background(), "k")
		if err == nil {
			_ = l.Release(context.Background())
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got %v, want an error naming the refused connection", err)
	}
	t.Logf("failed after %v: %v", time.Since(start), err)
}

// TestRequestTimeoutNamesDialError builds a backend over the caller's own
// client for an address where nothing listens: a single attempt fails after
// the request timeout, naming the refused connection, however long the
// caller's context is.
func TestRequestTimeoutNamesDialError(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + deadAddr(t)}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	b, err := etcdlock.New(cli, etcdlock.WithRequestTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	start := time.Now()
	err = within(t, 5*time.Second, func() error {
		_, err := b.Acquire(context.Background(), driver.AcquireRequest{Key: "k", Token: "t", TTL: time.Second})
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("got %v, want an error naming the refused connection", err)
	}
	t.Logf("failed after %v: %v", time.Since(start), err)
}

// TestInvalidOptions checks that every bad option value, in code or in the
// URL, is refused with ErrInvalidOption before anything is dialled.
func TestInvalidOptions(t *testing.T) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + deadAddr(t)}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for name, opt := range map[string]etcdlock.Option{
		"empty prefix":          etcdlock.WithPrefix(""),
		"slash prefix":          etcdlock.WithPrefix("//"),
		"zero request timeout":  etcdlock.WithRequestTimeout(0),
		"negative request time": etcdlock.WithRequestTimeout(-time.Second),
	} {
		if _, err := etcdlock.New(cli, opt); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("New with %s: got %v, want ErrInvalidOption", name, err)
		}
		if _, err := etcdlock.Dial(context.Background(), clientv3.Config{Endpoints: []string{"http://" + deadAddr(t)}}, opt); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Dial with %s: got %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := etcdlock.New(nil); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("New(nil): got %v, want ErrInvalidOption", err)
	}
	if _, err := etcdlock.Dial(context.Background(), clientv3.Config{Endpoints: []string{"http://" + deadAddr(t)}, DialTimeout: -time.Second}); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("Dial with a negative DialTimeout: got %v, want ErrInvalidOption", err)
	}
	addr := deadAddr(t)
	for _, q := range []string{"request_timeout=0s", "request_timeout=-1s", "dial_timeout=0s", "dial_timeout=soon", "dial_timeout=1s&dial_timeout=2s", "session_timeout=1s", "linked_queue=maybe", "key_layout=sorted", "key_layout="} {
		if _, err := distlock.Open(context.Background(), "etcd://"+addr+"/x?"+q); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Open with %s: got %v, want ErrInvalidOption", q, err)
		}
	}
	if _, err := distlock.Open(context.Background(), "etcd:///x"); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("Open with no endpoint: got %v, want ErrInvalidOption", err)
	}
}

// TestOpenURLParameters opens a live server with every parameter in the URL.
func TestOpenURLParameters(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := distlock.Open(ctx, "etcd://"+srv.Addr()+"/"+uniquePrefix(t)+"?dial_timeout=2s&request_timeout=3s&linked_queue=true&key_layout=ordered")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
