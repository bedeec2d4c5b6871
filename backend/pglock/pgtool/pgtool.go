// Package pgtool is pglock's side of distlock's store tools: the doctor
// checks, the bench floor and the migration of postgres:// and
// postgresql://. The backend
// does not import it; a program that runs the tools imports it for its
// side effect:
//
//	import _ "github.com/distlock/distlock/backend/pglock/pgtool"
package pgtool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	for _, scheme := range []string{"postgres", "postgresql"} {
		doctor.Register(scheme, "postgres", checkPostgres)
		floor.Register(scheme, openPostgresFloor)
		migrate.Register(scheme, migratePostgres)
	}
}
