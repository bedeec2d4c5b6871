package redislock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// WatchPrefix on a backend from Open (whose connections already track in
// the default mode, for loss tracking) and on a Cluster (a tracking
// connection per master): a grant and a release under the prefix are
// reported, keys outside it are not, and a tracking connection killed by
// the server is opened again after an empty batch, with changes reported
// after it.
func TestWatchPrefix(t *testing.T) {
	single := testserver.Redis(t)
	cluster := testserver.RedisCluster(t, 3)
	for _, tc := range []struct {
		name  string
		url   string
		addrs []string
	}{
		{"single", "redis://" + single.Addr(), []string{single.Addr()}},
		{"cluster", "redis-cluster://" + cluster.Addrs()[0], cluster.Addrs()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			watcher := newClient(t, openURL(t, tc.url))
			other := newClient(t, openURL(t, tc.url))
			ch, err := watcher.WatchPrefix(ctx, "watched/")
			if err != nil {
				t.Fatal(err)
			}
			// Keys in several slots, so that every master of the Cluster
			// reports some.
			for i := range 6 {
				key := fmt.Sprintf("watched/%d", i)
				l, err := other.Lock(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				reported(t, ch, key, "a grant")
				outside, err := other.Lock(ctx, fmt.Sprintf("unwatched/%d", i))
				if err != nil {
					t.Fatal(err)
				}
				if err := outside.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				reported(t, ch, key, "a release")
			}
			// Every master tracks; one drops its tracking connection: the
			// watch says so with an empty batch and goes on.
			for _, addr := range tc.addrs[1:] {
				if trackingConns(t, addr) == nil {
					t.Fatalf("no connection of %s tracks in broadcast mode", addr)
				}
			}
			killTracking(t, tc.addrs[0])
			for deadline := time.After(10 * time.Second); ; {
				select {
				case batch := <-ch:
					if len(batch) == 0 {
						goto resynced
					}
				case <-deadline:
					t.Fatal("no empty batch within 10 s of the tracking connections' end")
				}
			}
		resynced:
			// Tracking again: a grant under the prefix is reported.
			for range 100 {
				l, err := other.Lock(ctx, "watched/after")
				if err != nil {
					t.Fatal(err)
				}
				err = l.Release(ctx)
				if err != nil {
					t.Fatal(err)
				}
				select {
				case batch := <-ch:
					if slices.Contains(batch, "watched/after") {
						return
					}
				case <-time.After(100 * time.Millisecond):
				}
			}
			t.Fatal("no grant reported after the watch was opened again")
		})
	}
}

// reported waits up to 5 s for a batch naming key, after what, and fails if
// a batch names a key outside "watched/" or is empty.
func reported(t *testing.T, ch <-chan []string, key, what string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case batch, ok := <-ch:
			if !ok {
				t.Fatalf("the watch ended before it reported %s of %q", what, key)
			}
			if len(batch) == 0 {
				t.Fatalf("an empty batch while waiting for %s of %q: nothing was lost", what, key)
			}
			for _, k := range batch {
				if !strings.HasPrefix(k, "watched/") {
					t.Fatalf("a key outside the prefix was reported: %q", batch)
				}
			}
			if slices.Contains(batch, key) {
				return
			}
		case <-deadline:
			t.Fatalf("no report of %s of %q within 5 s", what, key)
		}
	}
}

// killTracking ends the connections of addr that track in broadcast mode,
// and fails if there is none.
func killTracking(t *testing.T, addr string) {
	t.Helper()
	ids := trackingConns(t, addr)
	if ids == nil {
		t.Fatalf("no connection of %s tracks in broadcast mode", addr)
	}
	for _, id := range ids {
		rawCommand(t, []string{addr}, "CLIENT", "KILL", "ID", id)
	}
}

// trackingConns returns the ids of addr's connections that track in
// broadcast mode (CLIENT LIST flags tB).
func trackingConns(t *testing.T, addr string) []string {
	t.Helper()
	var ids []string
	for _, line := range strings.Split(rawCommand(t, []string{addr}, "CLIENT", "LIST"), "\n") {
		if strings.Contains(line, " flags=tB ") {
			id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
			ids = append(ids, id)
		}
	}
	return ids
}

// BenchmarkWatchedLockRelease is Lock+Release by 16 goroutines on keys of
// their own, with and without a prefix watch of those keys open on another
// backend (draining its batches): the cost of the notices to the lock path.
//
//	go test -run '^$' -bench WatchedLockRelease -count 3 ./backend/redislock/
func BenchmarkWatchedLockRelease(b *testing.B) {
	s := testserver.Redis(b)
	for _, watched := range []bool{false, true} {
		name := "unwatched"
		if watched {
			name = "watched"
		}
		b.Run(name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if watched {
				w := openURL(b, "redis://"+s.Addr())
				b.Cleanup(func() { _ = w.Close() })
				ch, err := w.WatchPrefix(ctx, "bench/")
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					for range ch {
					}
				}()
			}
			c := distlock.New(openURL(b, "redis://"+s.Addr()))
			b.Cleanup(func() { _ = c.Close() })
			var n atomic.Int64
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				key := fmt.Sprintf("bench/%d", n.Add(1))
				for pb.Next() {
					l, err := c.Lock(ctx, key)
					if err != nil {
						b.Error(err)
						return
					}
					if err := l.Release(ctx); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
