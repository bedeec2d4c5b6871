package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/mysqlurl"
	"github.com/distlock/distlock/internal/pinned"
)

func init() {
	distlock.Register("mysql", func(ctx context.Context, u *url.URL) (driver.Backend, error) { return Open(ctx, u.String()) })
}

// ErrPoolExhausted means no connection of the handle became free in time:
// every held lock pins one, so the handle allows too few connections for the
// locks held at once (sql.DB.SetMaxOpenConns).
var ErrPoolExhausted = errors.New("mysqllock: connection pool exhausted")

// Backend holds MySQL or MariaDB named locks (GET_LOCK) on pinned
// connections of a database/sql handle.
type Backend struct {
	db    *sql.DB
	ownDB bool
	opts  config

	holds   *pinned.Holds[*session] // calls in flight enter it
	closing context.Context         // done once Close begins: ends every wait
	endAll  context.CancelFunc      // ends closing

	schemaMu sync.Mutex
	schemaOK atomic.Bool

	idMu sync.Mutex
	ids  map[any]uint64 // session ids by the driver's connection, see connID
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Waiter        = (*Backend)(nil)
	_ driver.Lister        = (*Backend)(nil)
	_ driver.PageLister    = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
	_ driver.Namer         = (*Backend)(nil)
)

// New returns a backend over db, a handle of github.com/go-sql-driver/mysql
// (driver name "mysql") in autocommit mode, the default. Close does not
// close db. Every held lock keeps one connection of db out of its pool; a
// handle with SetMaxOpenConns(n) holds at most n locks at once. Set
// interpolateParams=true in db's DSN: without it each statement costs a
// prepare and an execute, two round trips instead of one. It returns an
// error matching driver.ErrInvalidOption, naming the option, for an option
// out of range.
func New(db *sql.DB, opts ...Option) (*Backend, error) {
	if db == nil {
		return nil, fmt.Errorf("mysqllock: new: %w: nil *sql.DB", driver.ErrInvalidOption)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{db: db, opts: o, ids: make(map[any]uint64),
		holds: pinned.New[*session](pinned.Config{Name: "mysqllock", Keepalive: o.keepalive})}
	b.closing, b.endAll = context.WithCancel(context.Background())
	if o.cleanupEvery > 0 {
		b.holds.StartCleanup(o.cleanupEvery, o.cleanupBatch, b.Cleanup)
	}
	return b, nil
}

// Open returns a backend over a handle of its own (closed by Close) on
//
//	mysql://user:password@host:port/database?param=value
//
// where the parameters are go-sql-driver/mysql's DSN parameters, plus
// mysqllock's own: request_timeout (a Go duration, WithRequestTimeout),
// keepalive (WithKeepalive), pool_wait (WithPoolWait),
// kill_on_force_release (true or false, WithKillOnForceRelease) and
// max_open_conns (sql.DB.SetMaxOpenConns; the most locks held at once;
// unlimited by default). The dial timeout is the DSN's "timeout", 5s
// (DefaultConnectTimeout) if the URL sets none; interpolateParams is true
// unless the URL sets it. opts override the URL. Open checks the server with
// a ping bounded by ctx and the request timeout, so an unreachable server
// fails here, naming the dial error. A bad URL or parameter fails with an
// error matching driver.ErrInvalidOption and opens nothing.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	cfg, urlOpts, maxOpen, err := parseURL(rawURL)
	if err != nil {
		return nil, err
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysqllock: open: %w: %w", driver.ErrInvalidOption, err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(maxOpen)
	db.SetMaxIdleConns(16)
	b, err := New(db, append(urlOpts, opts...)...)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	b.ownDB = true
	pctx, cancel := context.WithTimeout(ctx, b.opts.requestTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("mysqllock: open %s: %w", cfg.Addr, err)
	}
	return b, nil
}

// parseURL turns a mysql:// URL into a driver configuration and mysqllock's
// options.
func parseURL(rawURL string) (*mysql.Config, []Option, int, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("mysqllock: open: %w: %s", driver.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, 0, bad("%v", err)
	}
	if u.Scheme != "mysql" || u.Host == "" {
		return nil, nil, 0, bad("%s: want mysql://user:password@host:port/database", driver.RedactURL(u))
	}
	q := u.Query()
	var opts []Option
	maxOpen := 0
	for name, set := range map[string]func(string) error{
		"request_timeout": durationParam(&opts, WithRequestTimeout),
		"keepalive":       durationParam(&opts, WithKeepalive),
		"pool_wait":       durationParam(&opts, WithPoolWait),
		"kill_on_force_release": func(v string) error {
			on, err := strconv.ParseBool(v)
			opts = append(opts, WithKillOnForceRelease(on))
			return err
		},
		"max_open_conns": func(v string) error {
			n, err := strconv.Atoi(v)
			if err == nil && n < 0 {
				err = errors.New("want 0 (unlimited) or more")
			}
			maxOpen = n
			return err
		},
	} {
		if !q.Has(name) {
			continue
		}
		v := q.Get(name)
		q.Del(name)
		if err := set(v); err != nil {
			return nil, nil, 0, bad("%s=%q: %v", name, v, err)
		}
	}
	u.RawQuery = q.Encode() // less the parameters read above
	cfg, err := mysqlurl.Config(u)
	if err != nil {
		return nil, nil, 0, bad("%s: %v", driver.RedactURL(u), err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultConnectTimeout
	}
	if !q.Has("interpolateParams") {
		cfg.InterpolateParams = true
	}
	return cfg, opts, maxOpen, nil
}

// durationParam returns a setter that parses a Go duration into option with.
func durationParam(opts *[]Option, with func(time.Duration) Option) func(string) error {
	return func(v string) error {
		d, err := time.ParseDuration(v)
		if err == nil {
			*opts = append(*opts, with(d))
		}
		return err
	}
}

// Name returns "mysql".
func (b *Backend) Name() string { return "mysql" }

// Migrate creates the holder table if it does not exist. Backends also do it
// on first use; call it at deployment when the locking user may not create
// tables.
func (b *Backend) Migrate(ctx context.Context) error {
	if err := b.holds.Enter("migrate", ""); err != nil {
		return err
	}
	defer b.holds.Leave()
	return b.migrate(ctx)
}

func (b *Backend) migrate(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, b.opts.requestTimeout)
	defer cancel()
	if _, err := b.db.ExecContext(qctx, migrateSQL); err != nil {
		return fmt.Errorf("mysqllock: migrate: %w", err)
	}
	var width int
	if err := b.db.QueryRowContext(qctx, tokenWidthSQL).Scan(&width); err != nil {
		return fmt.Errorf("mysqllock: migrate: token width: %w", err)
	}
	if width < distlock.MaxTokenLen { // an earlier schema's VARCHAR(64)
		if _, err := b.db.ExecContext(qctx, widenTokenSQL); err != nil {
			return fmt.Errorf("mysqllock: migrate: widen the token column: %w", err)
		}
	}
	return nil
}

// ensureSchema runs the migration once per backend.
func (b *Backend) ensureSchema(ctx context.Context) error {
	if b.schemaOK.Load() {
		return nil
	}
	b.schemaMu.Lock()
	defer b.schemaMu.Unlock()
	if b.schemaOK.Load() {
		return nil
	}
	if err := b.migrate(ctx); err != nil {
		return err
	}
	b.schemaOK.Store(true)
	return nil
}

// Close ends every wait, releases every lock the backend still holds and
// returns their connections, stops the cleanup, waits for calls in flight,
// and closes the handle if Open created it. Every call after Close returns an
// error matching driver.ErrClosed.
func (b *Backend) Close() error {
	return b.holds.Close(b.endAll, func() error {
		if b.ownDB {
			return b.db.Close()
		}
		return nil
	})
}
