package etcdtool

import (
	"testing"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/floor/floortest"
)

func TestFloor(t *testing.T) {
	floortest.Run(t, "etcd://"+testserver.Etcd(t).Addr()+"/app?dial_timeout=2s", floor.Config{})
}
