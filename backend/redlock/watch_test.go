package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// watchEntries counts the watch entries of key on each node.
func watchEntries(t *testing.T, addrs []string, key string) []int {
	t.Helper()
	n := make([]int, len(addrs))
	for i, a := range addrs {
		r, err := testserver.RedisCommand(context.Background(), a, "ZCARD", lockName(key)+":watchers")
		if err != nil {
			t.Fatal(err)
		}
		if n[i], err = strconv.Atoi(r); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// eventually waits up to within for cond.
func eventually(within time.Duration, cond func() bool) bool {
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestWatchShared: the watches of one key share one entry on each node,
// whose release wakes them all; the entry outlives the last stop, for the
// next wait, which reuses it, and leaves the nodes a second later; Close
// takes it out at once and Watch then fails.
func TestWatchShared(t *testing.T) {
	addrs := addrsOf(nodes(t, 3))
	ctx := testContext(t)
	b := open(t, addrs, "")
	const key = "shared-watch"
	all := func(want int) func() bool {
		return func() bool {
			for _, n := range watchEntries(t, addrs, key) {
				if n != want {
					return false
				}
			}
			return true
		}
	}
	wakeA, stopA, err := b.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wakeB, stopB, err := b.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(time.Second, all(1)) {
		t.Fatalf("two watches of one key: entries per node %v, want one each", watchEntries(t, addrs, key))
	}
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "holder-token", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, key, "holder-token"); err != nil {
		t.Fatal(err)
	}
	for name, wake := range map[string]<-chan struct{}{"first": wakeA, "second": wakeB} {
		select {
		case <-wake:
		case <-time.After(2 * time.Second):
			t.Fatalf("the %s watch was not woken by the release", name)
		}
	}
	stopA()
	stopB()
	time.Sleep(200 * time.Millisecond)
	if !all(1)() {
		t.Fatalf("entries per node %v right after the last stop, want the entry kept", watchEntries(t, addrs, key))
	}
	_, stopC, err := b.Watch(ctx, key) // reuses the kept entry
	if err != nil {
		t.Fatal(err)
	}
	stopC()
	if !eventually(3*time.Second, all(0)) {
		t.Fatalf("entries per node %v after the linger, want none", watchEntries(t, addrs, key))
	}

	if _, _, err := b.Watch(ctx, key); err != nil {
		t.Fatal(err) // not stopped: Close must take it out
	}
	if !eventually(time.Second, all(1)) {
		t.Fatalf("entries per node %v, want one each", watchEntries(t, addrs, key))
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if !all(0)() {
		t.Fatalf("entries per node %v after Close, want none", watchEntries(t, addrs, key))
	}
	if _, _, err := b.Watch(ctx, key); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
}
