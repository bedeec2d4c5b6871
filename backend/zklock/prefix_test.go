package zklock_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/internal/faultproxy"
)

// WatchPrefix on ZooKeeper: a key's first grant (its parent created, seen
// by the root's watch), a waiter queueing and leaving, a release and a
// holder's session ending (its ephemeral node deleted) are reported, keys
// outside the prefix are not, and once the watching backend's own session
// expires the receiver gets an empty batch and changes after it are
// reported again.
func TestWatchPrefix(t *testing.T) {
	srv := zkServer(t)
	proxy := faultproxy.Start(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const timeout = 2 * time.Second
	watcher := distlock.New(dial(t, proxy.Addr(), root, zklock.WithSessionTimeout(timeout)))
	defer watcher.Close()
	other := distlock.New(dial(t, srv.Addr(), root))
	defer other.Close()

	ch, err := watcher.WatchPrefix(ctx, "watched/")
	if err != nil {
		t.Fatal(err)
	}
	l, err := other.Lock(ctx, "watched/a")
	if err != nil {
		t.Fatal(err)
	}
	reported(t, ch, "watched/a", "a first grant")
	outside, err := other.Lock(ctx, "unwatched")
	if err != nil {
		t.Fatal(err)
	}
	waiting, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := other.Lock(waiting, "watched/a", distlock.WithWait(time.Minute))
		waited <- err
	}()
	reported(t, ch, "watched/a", "a waiter queueing")
	stopWaiting()
	<-waited
	reported(t, ch, "watched/a", "a waiter leaving")
	if err := outside.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	reported(t, ch, "watched/a", "a release")

	// A holder whose session ends loses its node: reported.
	gone := distlock.New(dial(t, srv.Addr(), root))
	if _, err := gone.Lock(ctx, "watched/b"); err != nil {
		t.Fatal(err)
	}
	reported(t, ch, "watched/b", "a grant")
	if err := gone.Backend().Close(); err != nil { // its session ends without a release
		t.Fatal(err)
	}
	reported(t, ch, "watched/b", "its session's end")

	// The watcher's own session expires behind a blackholed link; the
	// backend learns it once the link is back.
	proxy.Blackhole()
	time.Sleep(2 * timeout)
	proxy.Restore()
	resynced := false
	for deadline := time.Now().Add(20 * time.Second); ; {
		l, err := other.Lock(ctx, "watched/c")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case batch := <-ch:
			switch {
			case len(batch) == 0:
				resynced = true
			case resynced && slices.Contains(batch, "watched/c"):
				return
			}
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("within 20 s of the link's return: told to read again %v, and no change reported after it", resynced)
		}
	}
}

// reported waits up to 10 s for a batch naming key, after what, and fails
// if a batch names a key outside "watched/".
func reported(t *testing.T, ch <-chan []string, key, what string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case batch, ok := <-ch:
			if !ok {
				t.Fatalf("the watch ended before it reported %s of %q", what, key)
			}
			for _, k := range batch {
				if !strings.HasPrefix(k, "watched/") {
					t.Fatalf("a key outside the prefix was reported: %q", batch)
				}
			}
			if len(batch) == 0 || slices.Contains(batch, key) {
				return
			}
		case <-deadline:
			t.Fatalf("no report of %s of %q within 10 s", what, key)
		}
	}
}

// BenchmarkWatchPrefixLatency: b.N grants of new keys by another client,
// 100 ms apart, each timed from the grant's answer to the batch naming it.
//
//	go test -run '^$' -bench WatchPrefixLatency -benchtime 200x ./backend/zklock/
func BenchmarkWatchPrefixLatency(b *testing.B) {
	srv := zkServer(b)
	root := uniqueRoot(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watcher := distlock.New(dial(b, srv.Addr(), root))
	defer watcher.Close()
	other := distlock.New(dial(b, srv.Addr(), root))
	defer other.Close()
	ch, err := watcher.WatchPrefix(ctx, "bench/")
	if err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	for i := range b.N {
		time.Sleep(100 * time.Millisecond)
		key := "bench/" + strconv.Itoa(i)
		l, err := other.Lock(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		granted := time.Now()
		for seen := false; !seen; {
			select {
			case batch := <-ch:
				seen = len(batch) == 0 || slices.Contains(batch, key)
			case <-time.After(10 * time.Second):
				b.Fatalf("no report of %q within 10 s", key)
			}
		}
		lat = append(lat, time.Since(granted))
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1e3, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1e3, "p99-ms")
	b.ReportMetric(0, "ns/op")
}
