package mysqlstore

import (
	"context"
	"database/sql"
	"net/url"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/idem"
)

func init() {
	idem.RegisterURL("mysql", openURL)
	idem.RegisterURL("mysql+table", openTableURL)
}

// openURL is idem.OpenURL's way in: a Store in DefaultTable over a handle
// of its own on a mysql:// URL as mysqllock reads it, the table migrated.
func openURL(ctx context.Context, u *url.URL) (idem.Store, func(), error) {
	cfg, err := mysqllock.ParseURL(u)
	if err != nil {
		return nil, nil, err
	}
	connector, err := mysql.NewConnector(cfg.Driver)
	if err != nil {
		return nil, nil, err
	}
	return open(ctx, sql.OpenDB(connector))
}

// openTableURL is openURL for a mysql+table:// URL, as sqllock (the lease
// table) reads it.
func openTableURL(ctx context.Context, u *url.URL) (idem.Store, func(), error) {
	cfg, err := sqllock.ParseURL(u)
	if err != nil {
		return nil, nil, err
	}
	db, err := sql.Open(cfg.DriverName, cfg.DSN)
	if err != nil {
		return nil, nil, err
	}
	return open(ctx, db)
}

// open returns a Store over db, which its close function closes, the
// table migrated.
func open(ctx context.Context, db *sql.DB) (idem.Store, func(), error) {
	s, err := New(db)
	if err == nil {
		err = s.Migrate(ctx)
	}
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return s, func() { _ = db.Close() }, nil
}
