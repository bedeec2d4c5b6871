package sqllock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"

	"github.com/distlock/distlock/driver"
)

// errDBClosed is the error database/sql returns for every call on a closed
// *sql.DB ("sql: database is closed"). database/sql does not export it, but
// returns one package-level value each time, so it is captured once from a
// handle closed on purpose and matched by identity with errors.Is, never by
// its text.
var errDBClosed = closedDBError()

func closedDBError() error {
	db := sql.OpenDB(noConnector{})
	_ = db.Close()
	return db.PingContext(context.Background())
}

// noConnector is a database/sql connector that never connects; it only
// serves closedDBError.
type noConnector struct{}

func (noConnector) Connect(context.Context) (sqldriver.Conn, error) { return nil, sqldriver.ErrBadConn }
func (c noConnector) Driver() sqldriver.Driver                      { return c }
func (noConnector) Open(string) (sqldriver.Conn, error)             { return nil, sqldriver.ErrBadConn }

// fail wraps err from a call to the database (see driver.Wrap). After
// Close, or when the database handle was closed, the error also matches
// driver.ErrClosed, so the caller can tell it from a transient failure;
// one that says a table is missing matches driver.ErrNoSchema.
func (b *Backend) fail(err error) error {
	if !errors.Is(err, driver.ErrClosed) && (b.isClosed() || errors.Is(err, errDBClosed)) {
		err = fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	return driver.Wrap("sqllock", noSchema(err))
}

// errClosed is the cause fail reports for a call after Close.
var errClosed = fmt.Errorf("%w: the backend", driver.ErrClosed)
