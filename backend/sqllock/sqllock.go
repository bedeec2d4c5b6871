package sqllock

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/distlock/distlock/driver"
)

// Backend keeps leases in the table distlock_leases.
type Backend struct {
	db      *sql.DB
	d       *Dialect
	opts    options
	ownDB   bool
	stmtsMu sync.Mutex
	stmts   map[string]*sql.Stmt

	notices *listener // release notices; PostgreSQL only

	ctx    context.Context // cancelled by Close, ends background work
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var (
	_ driver.Backend  = (*Backend)(nil)
	_ driver.Lister   = (*Backend)(nil)
	_ driver.Namer    = (*Backend)(nil)
	_ driver.Notifier = (*Backend)(nil)
)

// New returns a backend over db in dialect d. Call Migrate once to create the
// table. Close does not close db.
func New(db *sql.DB, d *Dialect, opts ...Option) *Backend {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	b := &Backend{db: db, d: d, opts: o, stmts: make(map[string]*sql.Stmt)}
	if d.notifies {
		b.notices = &listener{db: db}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if o.cleanupEvery > 0 {
		b.wg.Add(1)
		go b.cleanupLoop()
	}
	return b
}

// DB returns the database handle the backend uses.
func (b *Backend) DB() *sql.DB { return b.db }

// Name returns "sql-" and the dialect's name.
func (b *Backend) Name() string { return "sql-" + b.d.name }

// Migrate creates the fence sequence and the lease table if they do not
// exist.
func (b *Backend) Migrate(ctx context.Context) error {
	for _, q := range b.d.migrate {
		if _, err := b.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("sqllock: migrate: %w", err)
		}
	}
	return nil
}

// stmt returns q prepared once for this backend.
func (b *Backend) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	b.stmtsMu.Lock()
	defer b.stmtsMu.Unlock()
	if s := b.stmts[q]; s != nil {
		return s, nil
	}
	s, err := b.db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	b.stmts[q] = s
	return s, nil
}

// exec runs q and returns the rows it changed.
func (b *Backend) exec(ctx context.Context, q string, args ...any) (int64, error) {
	s, err := b.stmt(ctx, q)
	if err != nil {
		return 0, err
	}
	res, err := s.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (b *Backend) queryRow(ctx context.Context, q string, args ...any) (*sql.Row, error) {
	s, err := b.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return s.QueryRowContext(ctx, args...), nil
}

// Acquire inserts key for req.Token, or takes over its row if the lease
// expired or was released, in one statement.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	meta, err := encodeMeta(req.Meta)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("sqllock: acquire %q: metadata: %w", req.Key, err)
	}
	var (
		holder string
		fence  int64
	)
	row, err := b.queryRow(ctx, b.d.acquire, req.Key, req.Token, req.TTL.Microseconds(), req.Meta.Owner, meta)
	if err == nil {
		err = row.Scan(&holder, &fence)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows), err == nil && holder != req.Token:
		return driver.Grant{}, fmt.Errorf("sqllock: acquire %q: %w", req.Key, driver.ErrNotAcquired)
	case err != nil:
		return driver.Grant{}, fmt.Errorf("sqllock: acquire %q: %w", req.Key, err)
	}
	return driver.Grant{Fence: uint64(fence)}, nil
}

// encodeMeta returns m as JSON for the metadata column; a zero m, the usual
// case, is "{}" without encoding.
func encodeMeta(m driver.Meta) (string, error) {
	if m.Owner == "" && m.BusinessID == "" && len(m.Labels) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// Renew moves the lease of key to ttl from now if token holds it.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	n, err := b.exec(ctx, b.d.renew, ttl.Microseconds(), key, token)
	if err == nil && n == 0 {
		// MariaDB counts rows changed, not matched: a renewal within the same
		// microsecond changes nothing yet still holds.
		var held int64
		var row *sql.Row
		if row, err = b.queryRow(ctx, b.d.holds, key, token); err == nil {
			err = row.Scan(&held)
		}
		if err == nil && held == 0 {
			return fmt.Errorf("sqllock: renew %q: %w", key, driver.ErrNotHeld)
		}
	}
	if err != nil {
		return fmt.Errorf("sqllock: renew %q: %w", key, err)
	}
	return nil
}

// Release frees key if token holds it by deleting its row.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	n, err := b.exec(ctx, b.d.release, key, token)
	if err != nil {
		return fmt.Errorf("sqllock: release %q: %w", key, err)
	}
	if n == 0 {
		return fmt.Errorf("sqllock: release %q: %w", key, driver.ErrNotHeld)
	}
	return nil
}

// Watch wakes a waiter when key is released. On PostgreSQL (with the pgx
// driver) one dedicated connection LISTENs for the whole backend; MariaDB has
// no notification, so there waiters poll and Watch returns an error matching
// errors.ErrUnsupported.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if b.notices == nil {
		return nil, nil, fmt.Errorf("sqllock: %s sends no release notices: %w", b.d.name, errors.ErrUnsupported)
	}
	if b.ctx.Err() != nil {
		return nil, nil, fmt.Errorf("sqllock: watch %q: backend closed", key)
	}
	return b.notices.watch(ctx, key)
}

// Close stops the periodic cleanup, closes the prepared statements, and
// closes the database handle if Open created it.
func (b *Backend) Close() error {
	if b.ctx.Err() != nil {
		return nil
	}
	b.cancel()
	b.wg.Wait()
	if b.notices != nil {
		b.notices.close()
	}
	b.stmtsMu.Lock()
	var errs []error
	for _, s := range b.stmts {
		errs = append(errs, s.Close())
	}
	clear(b.stmts)
	b.stmtsMu.Unlock()
	if b.ownDB {
		errs = append(errs, b.db.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqllock: close: %w", err)
	}
	return nil
}
