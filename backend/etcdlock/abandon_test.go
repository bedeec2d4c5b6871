package etcdlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
)

// TestAbandonedWaitLeavesNothing checks that a waiter whose wait ends
// deletes its queue entry before returning, and that a release leaves no
// entry behind.
func TestAbandonedWaitLeavesNothing(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli := admin(t, eps)
	prefix := uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := distlock.New(dial(t, eps, prefix)), distlock.New(dial(t, eps, prefix))
	defer a.Close()
	defer b.Close()
	const key = "tidy"
	l, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Lock(ctx, key, distlock.WithWait(200*time.Millisecond)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("wait on a held key: got %v, want ErrNotAcquired", err)
	}
	if q := entries(t, cli, prefix, key); len(q) != 1 {
		t.Fatalf("after an abandoned wait the queue is %q, want only the holder", q)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if q := entries(t, cli, prefix, key); len(q) != 0 {
		t.Fatalf("after release the queue is %q, want empty", q)
	}
}
