// Package mysqltool is mysqllock's side of distlock's store tools: the
// doctor checks of the MySQL or MariaDB server behind mysql://, which
// sqllock's tool package also runs (CheckServer) for mysql+table://, and
// the migration of mysql://. The backend does not import it; a program
// that runs the tools imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/mysqllock/mysqltool"
package mysqltool

import (
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	doctor.Register("mysql", "mysql", Check)
	migrate.Register("mysql", Migrate)
	floor.None("mysql", "not written yet: GET_LOCK(name, 0) and RELEASE_LOCK(name) on a pinned connection would be its floor")
}
