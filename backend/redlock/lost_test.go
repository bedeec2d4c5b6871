package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
	"github.com/distlock/distlock/observe"
)

// A Redlock holder is told at once, not at its next renewal (a third of its
// 30 s lease), once fewer than a majority of the nodes hold its key: each
// node tracks the key it granted. A minority's loss changes nothing.
func TestLossOfAMajorityTold(t *testing.T) {
	addrs := addrsOf(nodes(t, 3))
	c := distlock.New(open(t, addrs, ""))
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "majority-lost"
	l, err := c.Lock(ctx, key, distlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // past the nodes' first tracked read
	del := func(addr string) {
		if _, err := testserver.RedisCommand(ctx, addr, "DEL", lockName(key)); err != nil {
			t.Fatal(err)
		}
	}
	del(addrs[0])
	select {
	case <-l.Done():
		t.Fatalf("lost with 2 of 3 nodes still holding: %v", l.Err())
	case <-time.After(time.Second):
	}
	start := time.Now()
	del(addrs[1])
	select {
	case <-l.Done():
		t.Logf("told %v after the second node's DEL", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("not told within 5 s that only 1 of 3 nodes holds")
	}
	if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) || !strings.Contains(err.Error(), "("+observe.LossDeleted+")") {
		t.Fatalf("Err() = %v, want ErrLockLost (%s)", err, observe.LossDeleted)
	}
}

// BenchmarkMajorityLossNotice is locktest.LossNoticeOf on 3 nodes with a
// DEL of the held key on two of them, held past the nodes' first tracked
// read (from just before the first DEL is sent to Done()).
func BenchmarkMajorityLossNotice(b *testing.B) {
	addrs := addrsOf(nodes(b, 3))
	c := distlock.New(open(b, addrs, ""))
	defer c.Close()
	locktest.LossNoticeOf(b, c, 150*time.Millisecond, func(ctx context.Context, key string) error {
		for _, a := range addrs[:2] {
			if _, err := testserver.RedisCommand(ctx, a, "DEL", lockName(key)); err != nil {
				return err
			}
		}
		return nil
	})
}
