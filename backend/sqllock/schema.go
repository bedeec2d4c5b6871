package sqllock

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/distlock/distlock/driver"
)

// CheckSchema reports whether the tables (and on PostgreSQL the sequence)
// that Migrate makes exist, creating nothing: it returns nil if they do, an
// error matching driver.ErrNoSchema that names the one missing if one is,
// and the store's error if it cannot tell.
func (b *Backend) CheckSchema(ctx context.Context) error {
	if err := b.execUnprepared(ctx, b.d.checkSchema); err != nil {
		return b.fail(err)
	}
	return nil
}

// Errors of a missing table: PostgreSQL's SQLSTATE undefined_table (also
// a missing sequence) and MySQL's and MariaDB's ER_NO_SUCH_TABLE.
const (
	pgUndefinedTable = "42P01"
	mysqlNoSuchTable = 1146
)

// noSchema returns err, the database's, matching driver.ErrNoSchema too if
// it says that a table or sequence is missing.
func noSchema(err error) error {
	var pg *pgconn.PgError
	var my *mysql.MySQLError
	if errors.As(err, &pg) && pg.Code == pgUndefinedTable || errors.As(err, &my) && my.Number == mysqlNoSuchTable {
		return fmt.Errorf("%w: %w", driver.ErrNoSchema, err)
	}
	return err
}
