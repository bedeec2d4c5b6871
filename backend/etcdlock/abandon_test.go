package etcdlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestAbandonedWaitLeavesNothing checks that a waiter whose wait ends
// deletes its queue entry before returning, and that a release leaves no
// entry behind.
func TestAbandonedWaitLeavesNothing(t *testing.T) {
	e := newStoreEnv(t)
	cli, prefix, ctx := e.cli, e.prefix, e.ctx
	a, b := e.client(t), e.client(t)
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
