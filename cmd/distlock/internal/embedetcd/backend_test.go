package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/locktest"
)

// TestBackendConformance holds the backend serve runs over its embedded
// store, which calls the store's server in-process, to the contract of
// every backend. A lost lock is an operator's forced release, made through
// the socket as another process would.
func TestBackendConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd")
	}
	e, err := Start(testContext(t, time.Minute), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	operator, err := etcdlock.New(dial(t, e))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = operator.Close() })
	locktest.Run(t, locktest.Harness{
		NewBackend: func(t testing.TB) driver.Backend {
			b, err := e.Backend(t.Context(), nil)
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		DeleteKey: func(t testing.TB, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := operator.ForceRelease(ctx, key, driver.ForceOptions{}); err != nil {
				t.Fatalf("force release %q: %v", key, err)
			}
		},
		NotifyLatency: 150 * time.Millisecond,
	})
}

// TestBackendAfterClose: once the store is closed, Backend fails saying so,
// whether or not it made a backend before.
func TestBackendAfterClose(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd")
	}
	e, err := Start(testContext(t, time.Minute), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.Backend(testContext(t, 10*time.Second), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := distlock.New(b)
	l, err := c.Lock(testContext(t, 10*time.Second), "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(testContext(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Backend(testContext(t, 10*time.Second), nil); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Backend after Close: %v, want driver.ErrClosed", err)
	}
	never, err := Start(testContext(t, time.Minute), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := never.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := never.Backend(testContext(t, 10*time.Second), nil); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Backend after Close, none before: %v, want driver.ErrClosed", err)
	}
}

// TestBackendCloseWithManyHolds closes a backend that holds 4 000 locks,
// each with its loss watch started, as a service with thousands of
// sessions does at shutdown: Close must end every watch and return. (The
// hang it guards against was found at 15 000 by BenchmarkSessions; 15 000
// here took 80 s of a loaded 2-core machine under -race, and the requests
// of its acquisitions timed out.)
func TestBackendCloseWithManyHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd")
	}
	ctx := testContext(t, 2*time.Minute)
	e, err := Start(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	b, err := e.Backend(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const n = 4000
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	for w := range 64 {
		wg.Go(func() {
			for i := w; i < n; i += 64 {
				req := driver.AcquireRequest{Key: fmt.Sprintf("many/%05d", i), Token: fmt.Sprintf("token-%05d", i), TTL: time.Minute}
				if _, err := b.Acquire(ctx, req); err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	time.Sleep(time.Second) // every loss watch has started
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close still runs 30s later")
	}
}
