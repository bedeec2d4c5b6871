// Package natstool is natslock's side of distlock's store tools: the
// doctor checks, the migration (the bucket) and the bench floor of
// nats://. The backend does not import it; a program that runs the tools
// imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/natslock/natstool"
package natstool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	doctor.Register("nats", "nats", checkNATS)
	migrate.Register("nats", migrateNATS)
	floor.Register("nats", openNATSFloor)
}
