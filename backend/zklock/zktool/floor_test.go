package zktool

import (
	"testing"

	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/floor/floortest"
)

func TestFloor(t *testing.T) {
	floortest.Run(t, "zk://"+testserver.ZooKeeper(t).Addr()+"/app?dial_timeout=10s&session_timeout=5s&request_timeout=2s", floor.Config{})
}

// TestFloorRefusedAsOpen: a URL zklock refuses, the floor refuses in its
// words.
func TestFloorRefusedAsOpen(t *testing.T) {
	floortest.Refused(t, zklock.ParseURL, "zk://127.0.0.1:1?connect_timeout=10s", "zk://127.0.0.1:1?session_timeout=soon")
}
