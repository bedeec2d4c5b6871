package zktool

import (
	"testing"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/floor/floortest"
)

func TestFloor(t *testing.T) {
	floortest.Run(t, "zk://"+testserver.ZooKeeper(t).Addr()+"/app?connect_timeout=10s", floor.Config{})
}
