package redistool

import (
	"context"
	"testing"

	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/floor/floortest"
)

func TestFloor(t *testing.T) {
	srv := testserver.Redis(t)
	floortest.Run(t, "redis://"+srv.Addr()+"?prefix=app:&dial_timeout=2s&request_timeout=2s&waiter_timeout=2s", floor.Config{})
	left, err := testserver.RedisCommand(context.Background(), srv.Addr(), "KEYS", floor.KeyPrefix+"*")
	if err != nil || left != "" {
		t.Errorf("keys left behind: %q, %v", left, err)
	}
}

// TestFloorRefusedAsOpen: a URL redislock refuses, the floor refuses in its
// words.
func TestFloorRefusedAsOpen(t *testing.T) {
	floortest.Refused(t, redislock.ParseURL, "redis://127.0.0.1:1?colour=red", "redis://127.0.0.1:1?waiter_timeout=1ms")
}
