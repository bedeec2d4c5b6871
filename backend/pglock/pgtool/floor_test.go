package pgtool

import (
	"testing"

	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/floor/floortest"
)

func TestFloor(t *testing.T) {
	floortest.Run(t, testserver.PostgresDSN(testserver.Postgres(t))+"&request_timeout=2s&key_ids=fnv1a&terminate_on_force_release=true", floor.Config{})
}

// TestFloorRefusedAsOpen: a URL pglock refuses, the floor refuses in its
// words.
func TestFloorRefusedAsOpen(t *testing.T) {
	floortest.Refused(t, pglock.ParseURL, "postgres://postgres@127.0.0.1:1/db?key_ids=md5", "postgres://postgres@127.0.0.1:1/db?request_timeout=soon")
}
