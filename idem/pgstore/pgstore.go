// Package pgstore keeps the records of an idem.Keeper in a PostgreSQL table
// through a pgx pool, and offers a transactional form, DoTx, that writes the
// record in the caller's transaction so that the business write and the
// record commit together or not at all.
//
// The table (DefaultTable unless WithTable says otherwise; Migrate creates
// it) has the idempotency key as primary key, the request's SHA-256, the
// result, the failed flag, the fence of the attempt that wrote it, and the
// end of its retention by the server's clock:
//
//	CREATE TABLE IF NOT EXISTS idem_records (
//		key          text PRIMARY KEY,
//		request_hash bytea NOT NULL,
//		result       bytea NOT NULL,
//		failed       boolean NOT NULL,
//		fence        numeric(20) NOT NULL,
//		expires_at   timestamptz NOT NULL)
//
// A read is one SELECT by key of a live row; a write is one conditional
// upsert that replaces a row only once it has expired.
// Expired rows stay until a write of the same key replaces them or the
// caller deletes them (DELETE FROM idem_records WHERE expires_at < now()).
//
// Every request is bounded by WithRequestTimeout (default 5s) and the
// caller's context; connect timeouts are those of the pool passed to New.
package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/internal/storeopt"
)

// DefaultTable is the table's name unless WithTable says otherwise.
const DefaultTable = "idem_records"

// DefaultRequestTimeout bounds each request unless WithRequestTimeout says
// otherwise.
const DefaultRequestTimeout = storeopt.DefaultRequestTimeout

// Store is an idem.Store in PostgreSQL.
type Store struct {
	pool    *pgxpool.Pool
	table   string
	timeout time.Duration
	get     string
	put     string
}

var _ idem.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*storeopt.Config)

// WithTable sets the table's name, optionally schema-qualified. The default
// is DefaultTable; it must be an identifier (letters, digits, underscores,
// one optional dot).
func WithTable(name string) Option { return func(c *storeopt.Config) { c.Table = name } }

// WithRequestTimeout bounds each request. The default is
// DefaultRequestTimeout; it must be positive.
func WithRequestTimeout(d time.Duration) Option { return func(c *storeopt.Config) { c.Timeout = d } }

// New returns a store over pool, which stays the caller's to close.
func New(pool *pgxpool.Pool, opts ...Option) (*Store, error) {
	if pool == nil {
		return nil, fmt.Errorf("pgstore: %w: pool is nil", distlock.ErrInvalidOption)
	}
	cfg, err := storeopt.Apply("pgstore", storeopt.Config{Table: DefaultTable, Timeout: DefaultRequestTimeout}, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{pool: pool, table: cfg.Table, timeout: cfg.Timeout}
	s.get = `SELECT request_hash, result, failed, fence FROM ` + s.table + ` WHERE key = $1 AND expires_at > now()`
	s.put = `INSERT INTO ` + s.table + ` AS r (key, request_hash, result, failed, fence, expires_at)
VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET request_hash = EXCLUDED.request_hash, result = EXCLUDED.result,
	failed = EXCLUDED.failed, fence = EXCLUDED.fence, expires_at = EXCLUDED.expires_at
WHERE r.expires_at <= now()`
	return s, nil
}

// Migrate creates the table if it does not exist. Stores that migrate at
// once, as replicas do on first use, take turns: PostgreSQL's CREATE TABLE
// IF NOT EXISTS is not atomic, and one of two at once may fail.
func (s *Store) Migrate(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('distlock idem migrate', 0))`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.table+` (
	key          text PRIMARY KEY,
	request_hash bytea NOT NULL,
	result       bytea NOT NULL,
	failed       boolean NOT NULL,
	fence        numeric(20) NOT NULL,
	expires_at   timestamptz NOT NULL)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: migrate: %w", err)
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
	err := s.pool.QueryRow(ctx, s.get, key).Scan(&hash, &r.Value, &r.Failed, &r.Fence)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return idem.Record{}, false, nil
	case err != nil:
		return idem.Record{}, false, fmt.Errorf("pgstore: get %q: %w", key, err)
	case len(hash) != len(r.Hash):
		return idem.Record{}, false, fmt.Errorf("pgstore: get %q: malformed record: request hash of %d bytes", key, len(hash))
	}
	copy(r.Hash[:], hash)
	return r, true, nil
}

// Put records r unless a live record is there.
func (s *Store) Put(ctx context.Context, key string, r idem.Record, keep time.Duration) (bool, error) {
	return s.putWith(ctx, s.pool, key, r, keep)
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (s *Store) putWith(ctx context.Context, db execer, key string, r idem.Record, keep time.Duration) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	value := r.Value
	if value == nil {
		value = []byte{} // the column is NOT NULL
	}
	tag, err := db.Exec(ctx, s.put, key, r.Hash[:], value, r.Failed, r.Fence, max(keep.Milliseconds(), 1))
	if err != nil {
		return false, fmt.Errorf("pgstore: put %q: %w", key, err)
	}
	return tag.RowsAffected() == 1, nil
}

// TxFunc is the work of DoTx: it writes through tx, the caller's transaction.
type TxFunc func(ctx context.Context, tx pgx.Tx, fence uint64) ([]byte, error)

// DoTx is k.Do with fn's writes and the record in one transaction, tx, which
// DoTx ends: it writes the record in tx and commits tx while the key's lock is
// still held, so a duplicate never sees the business write without the record
// or the record without the business write. A recorded failure (idem.Fail)
// commits tx as fn left it. Every other outcome rolls tx back: a replay, a
// conflict, an error of fn, a lost lock, a record of another attempt (the
// error matches idem.ErrSuperseded) or a failed write. k must keep its records
// in s.
func (s *Store) DoTx(ctx context.Context, k *idem.Keeper, tx pgx.Tx, key string, request []byte, fn TxFunc) (idem.Result, error) {
	if tx == nil || fn == nil {
		return idem.Result{}, fmt.Errorf("pgstore: do %q: %w: tx and fn are required", key, distlock.ErrInvalidOption)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		_ = tx.Rollback(rctx) // after a commit it does nothing
	}()
	return k.DoCommit(ctx, key, request,
		func(ctx context.Context, fence uint64) ([]byte, error) { return fn(ctx, tx, fence) },
		func(ctx context.Context, r idem.Record) (bool, error) {
			ok, err := s.putWith(ctx, tx, key, r, k.Retention())
			if err != nil || !ok {
				return false, err
			}
			if err := tx.Commit(ctx); err != nil {
				return false, fmt.Errorf("pgstore: commit %q: %w", key, err)
			}
			return true, nil
		})
}
