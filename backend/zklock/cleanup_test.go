package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/backend/zklock"
)

// TestAbandonedWaitAndEmptyParent opens a client from a zk:// URL, checks
// that a waiter whose wait ends deletes its node before returning, and that
// the key's parent is deleted once the queue is empty.
func TestAbandonedWaitAndEmptyParent(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := distlock.Open(ctx, "zk://"+srv.Addr()+root+"?session_timeout=4s")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key = "tidy"
	l, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, key, distlock.WithWait(200*time.Millisecond)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("wait on a held key: got %v, want ErrNotAcquired", err)
	}
	if q := queue(t, conn, root, key); len(q) != 1 {
		t.Fatalf("after an abandoned wait the queue is %q, want only the holder", q)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the empty parent is deleted", func() bool {
		ok, _, err := conn.Exists(parentOf(root, key))
		return err == nil && !ok
	})
}

// TestManyKeysLeaveNothing locks and releases many distinct keys, as a
// service locking per order or per job run would: once released, no node is
// left under the root, so the store does not grow with the number of keys.
func TestManyKeysLeaveNothing(t *testing.T) {
	const keys = 500
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, srv.Addr(), root))
	defer c.Close()
	for i := range keys {
		l, err := c.TryLock(ctx, fmt.Sprintf("order-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	eventually(t, "every parent under the root is deleted", func() bool {
		children, _, err := conn.Children(root)
		return err == nil && len(children) == 0
	})
	t.Logf("%d keys locked and released; the root was empty %v after the last release", keys, time.Since(start).Round(time.Millisecond))
}

// eventually polls cond for up to 10s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}
