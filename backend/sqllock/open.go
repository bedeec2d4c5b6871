package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	distlock.Register("mysql", func(ctx context.Context, u *url.URL) (driver.Backend, error) {
		dsn, err := mysqlDSN(u)
		if err != nil {
			return nil, err
		}
		return Open(ctx, "mysql", dsn, MariaDB)
	})
}

// Open opens a database handle of its own (closed by Close) with
// sql.Open(driverName, dsn), keeping up to 16 idle connections so that
// renewals do not wait for a new connection, checks it with a ping, and
// returns a backend over it in dialect d. The driver must be registered
// with database/sql.
func Open(ctx context.Context, driverName, dsn string, d *Dialect, opts ...Option) (*Backend, error) {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return nil, fmt.Errorf("sqllock: open: %w", err)
	}
	db.SetMaxIdleConns(16)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("sqllock: open: %w", err)
	}
	b := New(db, d, opts...)
	b.ownDB = true
	return b, nil
}

// mysqlDSN turns mysql://user:password@host:port/db?param=value into the
// go-sql-driver/mysql DSN user:password@tcp(host:port)/db?param=value.
func mysqlDSN(u *url.URL) (string, error) {
	var b strings.Builder
	if u.User != nil {
		b.WriteString(u.User.Username())
		if p, ok := u.User.Password(); ok {
			b.WriteString(":" + p)
		}
		b.WriteByte('@')
	}
	b.WriteString("tcp(" + u.Host + ")/" + strings.TrimPrefix(u.Path, "/"))
	if u.RawQuery != "" {
		b.WriteString("?" + u.RawQuery)
	}
	cfg, err := mysql.ParseDSN(b.String())
	if err != nil {
		return "", fmt.Errorf("sqllock: %s: %w", u.Redacted(), err)
	}
	return cfg.FormatDSN(), nil
}
