package sqllock

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// Backend keeps leases in the table distlock_leases.
type Backend struct {
	db      *sql.DB
	d       *Dialect
	opts    config
	ownDB   bool
	stmtsMu sync.Mutex
	stmts   map[string]*sql.Stmt
	closed  bool // under stmtsMu

	notices *listener // release notices; PostgreSQL only
	held    holders   // holds whose forced release notices tell; PostgreSQL only
	queue   queue     // this backend's places at the head of key queues; PostgreSQL only
	cut     pending   // attempts whose caller left before their statement ended

	ctx    context.Context // cancelled by Close, ends background work
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Lister        = (*Backend)(nil)
	_ driver.PageLister    = (*Backend)(nil)
	_ driver.Namer         = (*Backend)(nil)
	_ driver.Notifier      = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
)

// New returns a backend over db in dialect d. Call Migrate once to create the
// tables. Close does not close db. An invalid option, or a nil db or d,
// returns an error matching driver.ErrInvalidOption.
func New(db *sql.DB, d *Dialect, opts ...Option) (*Backend, error) {
	switch {
	case db == nil:
		return nil, fmt.Errorf("sqllock: New: nil *sql.DB: %w", driver.ErrInvalidOption)
	case d == nil:
		return nil, fmt.Errorf("sqllock: New: nil dialect: %w", driver.ErrInvalidOption)
	}
	o, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{db: db, d: d, opts: o, stmts: make(map[string]*sql.Stmt)}
	if d.notifies {
		b.notices = &listener{db: db, lost: b.held.removed, holding: b.held.following}
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	if o.cleanupEvery > 0 {
		b.wg.Add(1)
		go b.cleanupLoop()
	}
	return b, nil
}

// DB returns the database handle the backend uses.
func (b *Backend) DB() *sql.DB { return b.db }

// Name returns "sql-" and the dialect's name.
func (b *Backend) Name() string { return "sql-" + b.d.name }

// Migrate creates the tables (and on PostgreSQL the fence sequence) if they
// do not exist. On MariaDB, a schema of an earlier version, whose fences came
// from a sequence, is upgraded with its fence floor above that sequence, so
// fences keep increasing across the upgrade.
func (b *Backend) Migrate(ctx context.Context) error {
	for _, q := range b.d.migrate {
		if err := b.execUnprepared(ctx, q); err != nil {
			return b.fail(fmt.Errorf("migrate: %w", err))
		}
	}
	if b.d.hasFenceSequence == "" {
		return nil
	}
	var n, width int
	err := b.run(ctx, func(ctx context.Context) error {
		return b.db.QueryRowContext(ctx, b.d.hasFenceSequence).Scan(&n)
	})
	if err == nil && n > 0 {
		err = b.execUnprepared(ctx, b.d.migrateFromSequence)
	}
	if err == nil {
		err = b.run(ctx, func(ctx context.Context) error {
			return b.db.QueryRowContext(ctx, b.d.tokenWidth).Scan(&width)
		})
	}
	if err == nil && width < distlock.MaxTokenLen {
		err = b.execUnprepared(ctx, b.d.widenToken)
	}
	if err != nil {
		return b.fail(fmt.Errorf("migrate: %w", err))
	}
	return nil
}

// execUnprepared runs one statement that is run once (a migration), without
// preparing it, within the request timeout.
func (b *Backend) execUnprepared(ctx context.Context, q string) error {
	return b.run(ctx, func(ctx context.Context) error {
		_, err := b.db.ExecContext(ctx, q)
		return err
	})
}

// run calls f with ctx bounded by the request timeout, unless the backend
// is closed. A ctx due sooner is used as it is, without a timer.
func (b *Backend) run(ctx context.Context, f func(context.Context) error) error {
	if b.isClosed() {
		return errClosed
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > b.opts.requestTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.opts.requestTimeout)
		defer cancel()
	}
	return f(ctx)
}

// background runs f in a goroutine that Close waits for, unless Close has
// begun; it reports whether it did.
func (b *Backend) background(f func()) bool {
	b.stmtsMu.Lock()
	defer b.stmtsMu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		f()
	}()
	return true
}

func (b *Backend) isClosed() bool {
	b.stmtsMu.Lock()
	defer b.stmtsMu.Unlock()
	return b.closed
}

// stmt returns q prepared once for this backend.
func (b *Backend) stmt(ctx context.Context, q string) (*sql.Stmt, error) {
	b.stmtsMu.Lock()
	defer b.stmtsMu.Unlock()
	if b.closed {
		return nil, errClosed
	}
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

// exec runs q within the request timeout and returns its result.
func (b *Backend) exec(ctx context.Context, q string, args ...any) (res sql.Result, err error) {
	err = b.run(ctx, func(ctx context.Context) error {
		s, err := b.stmt(ctx, q)
		if err == nil {
			res, err = s.ExecContext(ctx, args...)
		}
		return err
	})
	return res, err
}

// changed runs q within the request timeout and returns the rows it changed.
func (b *Backend) changed(ctx context.Context, q string, args ...any) (int64, error) {
	res, err := b.exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// scanRow runs the one-row query q within the request timeout and scans its
// row with scan.
func (b *Backend) scanRow(ctx context.Context, scan func(*sql.Row) error, q string, args ...any) error {
	return b.run(ctx, func(ctx context.Context) error {
		s, err := b.stmt(ctx, q)
		if err != nil {
			return err
		}
		return scan(s.QueryRowContext(ctx, args...))
	})
}

// Acquire inserts key for req.Token, or takes over its row if the lease
// expired or was released, in one statement that draws the fence only once
// the key is won. If ctx ends first, Acquire returns ctx's error at once,
// and the statement runs to its end in the background, which releases
// whatever it took (see attempt.go).
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	meta, err := encodeMeta(req.Meta)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("sqllock: metadata: %w", err)
	}
	q := b.d.acquire
	if b.d.acquireQueued != "" && (b.opts.noQueue || b.queue.heads(req.Key)) {
		q = b.d.acquireQueued
	} else {
		// A place this backend is giving up in the background (a wait that
		// ended) would make its own attempt fail as a barge-in.
		b.queue.settled(ctx, req.Key)
	}
	// An attempt whose caller left may still take the key (attempt.go).
	b.cut.wait(ctx, req.Key)
	if err := ctx.Err(); err != nil {
		return driver.Grant{}, b.fail(err)
	}
	fence, err := b.grantDetached(ctx, req.Key, req.Token, q, req.Key, req.Token, req.TTL.Microseconds(), req.Meta.Owner, meta)
	switch {
	case err != nil:
		return driver.Grant{}, b.fail(err)
	case fence == 0:
		return driver.Grant{}, driver.ErrNotAcquired
	}
	g := driver.Grant{Fence: fence}
	if b.followsLoss(req) {
		g.Lost = b.held.hold(req.Key, req.Token, req.TTL)
		b.listenForLoss()
	}
	return g, nil
}

// followsLoss reports whether the backend tells req's holder of a forced
// release at once: on PostgreSQL, unless nobody follows the hold
// (req.Unfollowed), WithoutLossNotice says not to, or the database handle
// has no connection to spare for listening.
func (b *Backend) followsLoss(req driver.AcquireRequest) bool {
	return b.notices != nil && !req.Unfollowed && !b.opts.noLossNotice && b.db.Stats().MaxOpenConnections != 1
}

// listenForLoss starts the listening session in the background unless it
// runs. Failing, the next grant or wait tries again.
func (b *Backend) listenForLoss() {
	if b.notices.isRunning() {
		return
	}
	b.background(func() {
		ctx, cancel := context.WithTimeout(b.ctx, b.opts.requestTimeout)
		defer cancel()
		_ = b.notices.start(ctx)
	})
}

// grantReturning runs the acquire statement of a dialect that returns the
// new fence as a row, and no row if the key is held.
func grantReturning(ctx context.Context, b *Backend, q string, args ...any) (uint64, error) {
	var fence int64
	err := b.scanRow(ctx, func(r *sql.Row) error { return r.Scan(&fence) }, q, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return uint64(fence), err
}

// grantInsertID runs the acquire statement of a dialect without RETURNING:
// it sets LAST_INSERT_ID to the new fence, or to heldInsertID if the key is
// held, and the server reports it with the statement's result. An insert id
// of 0 means the statement found no fence floor to draw from.
func grantInsertID(ctx context.Context, b *Backend, q string, args ...any) (uint64, error) {
	res, err := b.exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	id, err := res.LastInsertId()
	switch {
	case err != nil:
		return 0, err
	case id == heldInsertID:
		return 0, nil
	case id == 0:
		return 0, errors.New("the row of distlock_fence_floor is missing: run Migrate to restore it")
	}
	return uint64(id), nil
}

// heldInsertID is the insert id of an acquire statement that found the key
// held: larger than any fence.
const heldInsertID = math.MaxInt64

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
	n, err := b.changed(ctx, b.d.renew, ttl.Microseconds(), key, token)
	if err == nil && n == 0 {
		// MariaDB counts rows changed, not matched: a renewal within the same
		// microsecond changes nothing yet still holds.
		var held int64
		err = b.scanRow(ctx, func(r *sql.Row) error { return r.Scan(&held) }, b.d.holds, key, token)
		if err == nil && held == 0 {
			b.held.forget(key, token)
			return driver.ErrNotHeld
		}
	}
	if err != nil {
		return b.fail(err)
	}
	b.held.renewed(key, token, ttl)
	return nil
}

// Release frees key if token holds it.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	n, err := b.changed(ctx, b.d.release, key, token)
	if err != nil {
		return b.fail(err)
	}
	b.held.forget(key, token)
	if n == 0 {
		return driver.ErrNotHeld
	}
	b.queue.settled(ctx, key)
	return nil
}

// Watch wakes a waiter when key is released. On PostgreSQL (with the pgx
// driver) one dedicated connection LISTENs for the whole backend, and Watch
// first queues the backend for key in the database (see queue.go; off with
// WithoutWaitQueue): it returns once the backend is at the head of the
// clients waiting for key, or when ctx ends, so that a release lets one
// client try, and clients are served in the order they began to wait.
// MariaDB has no notification, so there waiters poll and Watch returns an
// error matching errors.ErrUnsupported.
//
// Listening pins a connection of the database handle for the backend, and
// each place in a queue one more while it is held; a wait takes them only
// if one is left for the attempts (sql.DB.SetMaxOpenConns): a handle of one
// connection polls (Watch returns an error matching errors.ErrUnsupported),
// and one too small for a queue place waits on notices alone.
func (b *Backend) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if b.notices == nil {
		return nil, nil, fmt.Errorf("sqllock: %s sends no release notices: %w", b.d.name, errors.ErrUnsupported)
	}
	limit := b.db.Stats().MaxOpenConnections // 0: no limit
	if limit == 1 {
		return nil, nil, fmt.Errorf("sqllock: a database handle of one connection has none to listen for releases with: waiters poll (release notices need 2, a wait queue 3): %w",
			errors.ErrUnsupported)
	}
	var (
		wake <-chan struct{}
		stop func()
	)
	err := b.run(ctx, func(ctx context.Context) (err error) {
		wake, stop, err = b.notices.watch(ctx, key)
		return err
	})
	if err != nil {
		return nil, nil, b.fail(err)
	}
	leave, err := b.queue.join(ctx, b, key, limit)
	if err != nil {
		stop()
		return nil, nil, b.fail(err)
	}
	return wake, func() { stop(); leave() }, nil
}

// Close stops the periodic cleanup, closes the prepared statements, and
// closes the database handle if Open created it. Every call after Close
// returns an error matching driver.ErrClosed.
func (b *Backend) Close() error {
	b.stmtsMu.Lock()
	if b.closed {
		b.stmtsMu.Unlock()
		return nil
	}
	b.closed = true
	b.stmtsMu.Unlock()
	b.cancel()
	b.queue.close(b)
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
