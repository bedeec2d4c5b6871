// Package mysqlstore keeps the records of an idem.Keeper in a MySQL or
// MariaDB table through database/sql, and offers a transactional form, DoTx,
// that writes the record in the caller's transaction so that the business
// write and the record commit together or not at all.
//
// The table (DefaultTable unless WithTable says otherwise; Migrate creates
// it) has the idempotency key as primary key, the request's SHA-256, the
// result, the failed flag, the fence of the attempt that wrote it, and the
// end of its retention by the server's clock (UTC):
//
//	CREATE TABLE IF NOT EXISTS idem_records (
//		`key`        VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,
//		request_hash BINARY(32) NOT NULL,
//		result       LONGBLOB NOT NULL,
//		failed       BOOLEAN NOT NULL,
//		fence        BIGINT UNSIGNED NOT NULL,
//		expires_at   DATETIME(6) NOT NULL)
//
// A read is one SELECT by key of a live row; a write is one INSERT ... ON
// DUPLICATE KEY UPDATE that replaces a row only once it has expired. Expired rows stay until a write of the same key replaces them
// or the caller deletes them.
//
// Every request is bounded by WithRequestTimeout (default 5s) and the
// caller's context; connect timeouts are those of the *sql.DB passed to New
// (go-sql-driver/mysql's timeout parameter).
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/internal/storeopt"
)

// DefaultTable is the table's name unless WithTable says otherwise.
const DefaultTable = "idem_records"

// DefaultRequestTimeout bounds each request unless WithRequestTimeout says
// otherwise.
const DefaultRequestTimeout = storeopt.DefaultRequestTimeout

// Store is an idem.Store in MySQL or MariaDB.
type Store struct {
	db      *sql.DB
	table   string
	timeout time.Duration
	get     string
	put     string
}

var _ idem.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*storeopt.Config)

// WithTable sets the table's name, optionally database-qualified. The
// default is DefaultTable; it must be an identifier (letters, digits,
// underscores, one optional dot).
func WithTable(name string) Option { return func(c *storeopt.Config) { c.Table = name } }

// WithRequestTimeout bounds each request. The default is
// DefaultRequestTimeout; it must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(c *storeopt.Config) { c.Timeout = d } }

// New returns a store over db, which stays the caller's to close.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("mysqlstore: %w: db is nil", distlock.ErrInvalidOption)
	}
	cfg, err := storeopt.Apply("mysqlstore", storeopt.Config{Table: DefaultTable, Timeout: DefaultRequestTimeout}, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, table: cfg.Table, timeout: cfg.Timeout}
	s.get = "SELECT request_hash, result, failed, fence FROM " + s.table + " WHERE `key` = ? AND expires_at > UTC_TIMESTAMP(6)"
	// The condition is taken once, into @idem_ok, before any column changes.
	s.put = "INSERT INTO " + s.table + " (`key`, request_hash, result, failed, fence, expires_at)" + `
VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
	request_hash = IF(@idem_ok := (expires_at <= UTC_TIMESTAMP(6)), VALUES(request_hash), request_hash),
	result = IF(@idem_ok, VALUES(result), result),
	failed = IF(@idem_ok, VALUES(failed), failed),
	expires_at = IF(@idem_ok, VALUES(expires_at), expires_at),
	fence = IF(@idem_ok, VALUES(fence), fence)`
	return s, nil
}

// Migrate creates the table if it does not exist.
func (s *Store) Migrate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	_, err := s.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+s.table+" ("+
		"`key` VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin PRIMARY KEY,"+
		"request_hash BINARY(32) NOT NULL, result LONGBLOB NOT NULL, failed BOOLEAN NOT NULL,"+
		"fence BIGINT UNSIGNED NOT NULL, expires_at DATETIME(6) NOT NULL)")
	if err != nil {
		return fmt.Errorf("mysqlstore: migrate: %w", err)
	}
	return nil
}

// Get reads key's live record in one query.
func (s *Store) Get(ctx context.Context, key string) (idem.Record, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var (
		r    idem.Record
		hash []byte
	)
	err := s.db.QueryRowContext(ctx, s.get, key).Scan(&hash, &r.Value, &r.Failed, &r.Fence)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return idem.Record{}, false, nil
	case err != nil:
		return idem.Record{}, false, fmt.Errorf("mysqlstore: get %q: %w", key, err)
	case len(hash) != len(r.Hash):
		return idem.Record{}, false, fmt.Errorf("mysqlstore: get %q: malformed record: request hash of %d bytes", key, len(hash))
	}
	copy(r.Hash[:], hash)
	return r, true, nil
}

// Put records r unless a live record is there.
func (s *Store) Put(ctx context.Context, key string, r idem.Record, keep time.Duration) (bool, error) {
	// The user variable lives in the session: the statement needs one
	// connection throughout.
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("mysqlstore: put %q: %w", key, err)
	}
	defer conn.Close()
	return s.putWith(ctx, conn, key, r, keep)
}

// execer is a connection or a transaction.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func (s *Store) putWith(ctx context.Context, db execer, key string, r idem.Record, keep time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	value := r.Value
	if value == nil {
		value = []byte{} // the column is NOT NULL
	}
	res, err := db.ExecContext(ctx, s.put, key, r.Hash[:], value, r.Failed, r.Fence, max(keep.Microseconds(), 1))
	if err != nil {
		return false, fmt.Errorf("mysqlstore: put %q: %w", key, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("mysqlstore: put %q: %w", key, err)
	}
	return n > 0, nil // 1 inserted, 2 replaced, 0 refused
}

// TxFunc is the work of DoTx: it writes through tx, the caller's transaction.
type TxFunc func(ctx context.Context, tx *sql.Tx, fence uint64) ([]byte, error)

// DoTx is k.Do with fn's writes and the record in one transaction, tx, which
// DoTx ends: it writes the record in tx and commits tx while the key's lock is
// still held, so a duplicate never sees the business write without the record
// or the record without the business write. A recorded failure (idem.Fail)
// commits tx as fn left it. Every other outcome rolls tx back: a replay, a
// conflict, an error of fn, a lost lock, a record of another attempt (the
// error matches idem.ErrSuperseded) or a failed write. k must keep its records
// in s.
func (s *Store) DoTx(ctx context.Context, k *idem.Keeper, tx *sql.Tx, key string, request []byte, fn TxFunc) (idem.Result, error) {
	if tx == nil || fn == nil {
		return idem.Result{}, fmt.Errorf("mysqlstore: do %q: %w: tx and fn are required", key, distlock.ErrInvalidOption)
	}
	defer func() { _ = tx.Rollback() }() // after a commit it does nothing
	return k.DoCommit(ctx, key, request,
		func(ctx context.Context, fence uint64) ([]byte, error) { return fn(ctx, tx, fence) },
		func(ctx context.Context, r idem.Record) (bool, error) {
			ok, err := s.putWith(ctx, tx, key, r, k.Retention())
			if err != nil || !ok {
				return false, err
			}
			if err := tx.Commit(); err != nil {
				return false, fmt.Errorf("mysqlstore: commit %q: %w", key, err)
			}
			return true, nil
		})
}
