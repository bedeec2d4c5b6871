// Package sqltool is sqllock's side of distlock's store tools for the
// lease table's scheme mysql+table://: the server checks of mysqltool, and
// no bench floor yet. The backend does not import it; a program that runs
// the tools imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/sqllock/sqltool"
package sqltool

import (
	"github.com/distlock/distlock/backend/mysqllock/mysqltool"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
)

func init() {
	doctor.Register("mysql+table", "mysql", mysqltool.Check)
	floor.None("mysql+table", "not written yet: an INSERT of the key's row and a DELETE by key and token would be its floor")
}
