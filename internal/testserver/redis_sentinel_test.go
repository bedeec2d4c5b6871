package testserver

import (
	"context"
	"testing"
	"time"
)

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	s := RedisSentinel(t)
	ctx := context.Background()
	old := s.Primary()
	if _, err := RedisCommand(ctx, old.Addr(), "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := waitFor(wctx, func() error { return redisInfoHas(wctx, s.Replica().Addr(), "v", "GET", "k") }); err != nil {
		t.Fatalf("write not replicated: %v", err)
	}
	next := s.Failover(t)
	if next == old || s.Primary() != next || s.Replica() != old {
		t.Fatal("Failover did not swap the primary and the replica")
	}
	if _, err := RedisCommand(ctx, next.Addr(), "SET", "k2", "v"); err != nil {
		t.Fatalf("new primary refuses writes: %v", err)
	}
	if v, err := RedisCommand(ctx, next.Addr(), "GET", "k"); err != nil || v != "v" {
		t.Fatalf("new primary lost a replicated write: %q, %v", v, err)
	}
}
