// Package sqltool is sqllock's side of distlock's store tools for the
// lease table's scheme mysql+table://: the server checks of mysqltool and
// a check of the schema, the migration that creates the schema, and no
// bench floor yet. The backend does not import it; a program that runs
// the tools imports it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/sqllock/sqltool"
package sqltool

import (
	"context"
	"errors"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/backend/mysqllock/mysqltool"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	doctor.Register("mysql+table", "mysql", Check)
	floor.None("mysql+table", "not written yet: an INSERT of the key's row and a DELETE by key and token would be its floor")
	migrate.Register("mysql+table", Migrate)
}

// schema is what sqllock's Migrate makes on MySQL and MariaDB.
const schema = "the lease table distlock_leases and its fence floor distlock_fence_floor"

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
	if err := mysqltool.CheckServer(ctx, dc, false, o, r); err != nil {
		return err
	}
	dc.Timeout = min(dc.Timeout, o.Timeout)
	b, err := sqllock.OpenDSN(ctx, cfg.DriverName, dc.FormatDSN(), cfg.Dialect, sqllock.WithRequestTimeout(o.Timeout))
	if err != nil {
		r.Add(doctor.Unread("schema", dc.Addr, err, "SELECT 1 FROM distlock_leases, distlock_fence_floor LIMIT 0"))
		return nil
	}
	defer b.Close()
	r.Add(schemaFinding(dc.Addr, r.URL, b.CheckSchema(ctx)))
	return nil
}

// schemaFinding judges what sqllock's CheckSchema returned on the server
// node of the store whose URL is store.
func schemaFinding(node, store string, err error) doctor.Finding {
	switch {
	case err == nil:
		return doctor.Finding{Severity: doctor.Info, Check: "schema", Node: node, Seen: schema + " exist"}
	case errors.Is(err, driver.ErrNoSchema):
		return doctor.Finding{Severity: doctor.Danger, Check: "schema", Node: node,
			Seen:        strings.TrimPrefix(err.Error(), "distlock: ") + ": the backend does not create its tables on its own",
			Consequence: "every lock operation fails: no lock can be taken, inspected or released",
			Fix:         "create them once, with a user that may: " + migrate.Command(store) + " (or sqllock's Backend.Migrate)"}
	}
	return doctor.Unread("schema", node, err, "SELECT 1 FROM distlock_leases, distlock_fence_floor LIMIT 0")
}

// Migrate is the migration of a mysql+table:// URL, read by sqllock's
// ParseURL: sqllock's Migrate over a handle of its own.
func Migrate(ctx context.Context, u *url.URL) (string, error) {
	b, err := sqllock.Open(ctx, u.String())
	if err != nil {
		return "", err
	}
	defer b.Close()
	if err := b.Migrate(ctx); err != nil {
		return "", err
	}
	return schema, nil
}
