// Package sqltool is sqllock's side of distlock's store tools for the
// lease table's scheme mysql+table://: the server checks of mysqltool, and
// no bench floor yet. The backend does not import it; a program that runs
// the tools imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/sqllock/sqltool"
package sqltool

import (
	"context"
	"net/url"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/backend/mysqllock/mysqltool"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
)

func init() {
	doctor.Register("mysql+table", "mysql", Check)
	floor.None("mysql+table", "not written yet: an INSERT of the key's row and a DELETE by key and token would be its floor")
}

// Check is the doctor check of a mysql+table:// URL, read by
// sqllock.ParseURL: mysqltool.CheckServer of its server, whose locks are
// rows of a lease table.
func Check(ctx context.Context, u *url.URL, o doctor.Options, r *doctor.Report) error {
	cfg, err := sqllock.ParseURL(u)
	if err != nil {
		return doctor.Refused(u, err)
	}
	dc, err := mysql.ParseDSN(cfg.DSN)
	if err != nil {
		return doctor.Refused(u, err)
	}
	return mysqltool.CheckServer(ctx, dc, false, o, r)
}
