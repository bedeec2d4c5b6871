package etcdtool

import (
	"testing"

	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/floor/floortest"
)

func TestFloor(t *testing.T) {
	floortest.Run(t, "etcd://"+testserver.Etcd(t).Addr()+"/app?dial_timeout=2s&request_timeout=2s", floor.Config{})
}

// TestFloorRefusedAsOpen: a URL etcdlock refuses, the floor refuses in its
// words.
func TestFloorRefusedAsOpen(t *testing.T) {
	floortest.Refused(t, etcdlock.ParseURL, "etcd://127.0.0.1:1?colour=red", "etcd://127.0.0.1:1?dial_timeout=soon")
}
