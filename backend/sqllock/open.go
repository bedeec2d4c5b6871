package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/mysqlurl"
)

// DefaultDialTimeout is the connect timeout a mysql+table:// URL gets when
// it sets none ("timeout" query parameter).
const DefaultDialTimeout = DefaultRequestTimeout

// The lease table on MySQL and MariaDB is mysql+table://; mysql:// is the
// named-lock backend, package mysqllock.
func init() {
	distlock.Register("mysql+table", func(ctx context.Context, u *url.URL) (driver.Backend, error) {
		dsn, err := mysqlDSN(u)
		if err != nil {
			return nil, err
		}
		return Open(ctx, "mysql", dsn, MariaDB)
	})
}

// Open opens a database handle of its own (closed by Close) with
// sql.Open(driverName, dsn), keeping up to 16 idle connections so that
// renewals do not wait for a new connection, checks it with a ping bounded
// by ctx and the request timeout (WithRequestTimeout), and returns a backend
// over it in dialect d. The driver must be registered with database/sql. A
// store that cannot be reached fails with the driver's dial error; set the
// driver's own connect timeout in dsn ("connect_timeout" for pgx, "timeout"
// for go-sql-driver/mysql).
func Open(ctx context.Context, driverName, dsn string, d *Dialect, opts ...Option) (*Backend, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("sqllock: open: %w", err)
	}
	db.SetMaxIdleConns(16)
	b, err := New(db, d, opts...)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	b.ownDB = true
	if err := b.run(ctx, db.PingContext); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("sqllock: open: %w", err)
	}
	return b, nil
}

// mysqlDSN turns mysql+table://user:password@host:port/db?param=value into the
// go-sql-driver/mysql DSN user:password@tcp(host:port)/db?param=value, with
// a connect timeout of DefaultDialTimeout unless the URL sets "timeout".
func mysqlDSN(u *url.URL) (string, error) {
	cfg, err := mysqlurl.Config(u)
	if err != nil {
		return "", fmt.Errorf("sqllock: %s: %w", driver.RedactURL(u), err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultDialTimeout
	}
	return cfg.FormatDSN(), nil
}
