package pgtool

import (
	"testing"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/floor/floortest"
)

func TestFloor(t *testing.T) {
	floortest.Run(t, testserver.PostgresDSN(testserver.Postgres(t))+"&request_timeout=2s", floor.Config{})
}
