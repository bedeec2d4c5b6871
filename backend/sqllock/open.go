package sqllock

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/mysqlurl"
	"github.com/distlock/distlock/internal/urlq"
)

// DefaultDialTimeout is the connect timeout a mysql+table:// URL gets when
// it sets none ("timeout" query parameter).
const DefaultDialTimeout = DefaultRequestTimeout

// The lease table on MySQL and MariaDB is mysql+table://; mysql:// is the
// named-lock backend, package mysqllock.
func init() {
	distlock.Register("mysql+table", urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) }))
}

// pkg begins the errors of the backend's URL grammar.
const pkg = "sqllock"

// Config is what a mysql+table:// URL says: the database/sql handle to
// open, and the backend's options.
type Config struct {
	// DriverName and DSN are sql.Open's arguments.
	DriverName, DSN string
	// Dialect is the SQL of the database.
	Dialect *Dialect
	// Options are those the URL's parameters set; Open applies them before
	// its own.
	Options []Option
}

// ParseURL reads a lease-table URL without connecting:
//
//	mysql+table://user:password@host:port/database?param=value
//
// for MySQL and MariaDB (there is no URL form for PostgreSQL: see
// OpenDSN). Its parameters are sqllock's request_timeout
// (WithRequestTimeout) and go-sql-driver/mysql's DSN parameters, with a
// dial timeout ("timeout") of DefaultDialTimeout unless the URL sets one.
// Any other parameter is an error matching driver.ErrInvalidOption, as is
// an invalid value.
func ParseURL(u *url.URL) (Config, error) {
	if u.Scheme != "mysql+table" {
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want mysql+table", u.Scheme)
	}
	cfg := Config{DriverName: "mysql", Dialect: MariaDB}
	r := urlq.New(pkg, u.Query())
	var d time.Duration
	if r.Duration("request_timeout", &d) {
		cfg.Options = append(cfg.Options, WithRequestTimeout(d))
	}
	rest := r.Rest()
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if _, err := newConfig(cfg.Options); err != nil {
		return Config{}, err
	}
	mc, err := mysqlurl.Parse(pkg, u, rest)
	if err != nil {
		return Config{}, err
	}
	if mc.Timeout == 0 {
		mc.Timeout = DefaultDialTimeout
	}
	cfg.DSN = mc.FormatDSN()
	return cfg, nil
}

// Open opens a handle of its own on rawURL (see ParseURL) with OpenDSN.
// opts apply after the URL's.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := urlq.Parse(pkg, rawURL)
	if err != nil {
		return nil, err
	}
	return openURL(ctx, u, opts...)
}

// openURL is Open after url.Parse, and distlock.Open's way in.
func openURL(ctx context.Context, u *url.URL, opts ...Option) (*Backend, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	return OpenDSN(ctx, cfg.DriverName, cfg.DSN, cfg.Dialect, append(slices.Clip(cfg.Options), opts...)...)
}

// OpenDSN opens a database handle of its own (closed by Close) with
// sql.Open(driverName, dsn), keeping up to 16 idle connections so that
// renewals do not wait for a new connection, checks it with a ping bounded
// by ctx and the request timeout (WithRequestTimeout), and returns a backend
// over it in dialect d. The driver must be registered with database/sql
// (this package registers pgx's as "pgx"). It is the way to a PostgreSQL
// lease table from a connection string, which has no URL scheme of its
// own. A store that cannot be reached fails with the driver's dial error;
// set the driver's own connect timeout in dsn ("connect_timeout" for pgx,
// "timeout" for go-sql-driver/mysql).
func OpenDSN(ctx context.Context, driverName, dsn string, d *Dialect, opts ...Option) (*Backend, error) {
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
		return nil, fmt.Errorf("sqllock: connect: %w", err)
	}
	return b, nil
}
