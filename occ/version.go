package occ

import (
	"context"
	"database/sql"
	"fmt"
)

// Updater runs a statement and returns how many rows it changed.
type Updater interface {
	Update(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
}

// Execer is what database/sql's *DB, *Tx and *Conn have in common.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// SQL adapts a database/sql handle (*sql.DB, *sql.Tx, *sql.Conn).
func SQL(db Execer) Updater { return sqlUpdater{db} }

type sqlUpdater struct{ db Execer }

func (u sqlUpdater) Update(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := u.db.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// Pgx adapts an Exec method of pgx (pgx.Conn, pgxpool.Pool, pgx.Tx), whose
// command tag reports the rows changed, without this package importing pgx:
//
//	occ.UpdateVersion(ctx, occ.Pgx(pool.Exec), query, args...)
func Pgx[T interface{ RowsAffected() int64 }](exec func(ctx context.Context, sql string, args ...any) (T, error)) Updater {
	return pgxUpdater[T](exec)
}

type pgxUpdater[T interface{ RowsAffected() int64 }] func(ctx context.Context, sql string, args ...any) (T, error)

func (f pgxUpdater[T]) Update(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := f(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// UpdateVersion runs a versioned update that names one row by its key and
// the version read before, such as
//
//	UPDATE orders SET status = $3, version = version + 1
//	WHERE id = $1 AND version = $2
//
// and returns nil if it changed that row, or an error matching ErrConflict if
// it changed none: another writer moved the version first (or the row is
// gone). Changing more than one row is reported as an error: the WHERE clause
// does not name a single row.
func UpdateVersion(ctx context.Context, u Updater, query string, args ...any) error {
	n, err := u.Update(ctx, query, args...)
	switch {
	case err != nil:
		return fmt.Errorf("occ: versioned update: %w", err)
	case n == 0:
		return fmt.Errorf("occ: versioned update: %w: no row had the expected version", ErrConflict)
	case n > 1:
		return fmt.Errorf("occ: versioned update changed %d rows; its WHERE clause must name one row and its version", n)
	}
	return nil
}
