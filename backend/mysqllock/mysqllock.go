package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pinned"
)

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
	o, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{db: db, opts: o, ids: make(map[any]uint64),
		holds: pinned.New[*session](pinned.Config{Name: "mysqllock", Keepalive: o.Keepalive})}
	b.closing, b.endAll = context.WithCancel(context.Background())
	if o.CleanupInterval > 0 {
		b.holds.StartCleanup(o.CleanupInterval, o.CleanupBatch, b.Cleanup)
	}
	return b, nil
}

// Name returns "mysql".
func (b *Backend) Name() string { return "mysql" }

// Migrate creates the holder table if it does not exist. Backends also do it
// on first use; call it at deployment when the locking user may not create
// tables.
func (b *Backend) Migrate(ctx context.Context) error {
	if err := b.holds.Enter(); err != nil {
		return fmt.Errorf("mysqllock: migrate: %w", err)
	}
	defer b.holds.Leave()
	return b.migrate(ctx)
}

func (b *Backend) migrate(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
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
