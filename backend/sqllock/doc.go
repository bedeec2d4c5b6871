// Package sqllock is a distlock backend on a lease table over database/sql.
// The same code runs on PostgreSQL (driver "pgx") and on MariaDB and MySQL 8
// (driver "mysql"); what differs is the SQL of a Dialect, kept in embedded
// files.
//
//	b, err := sqllock.New(db, sqllock.Postgres) // or sqllock.MariaDB (alias MySQL)
//
// One row per key (schema in Migrate and in docs/sql.md): the holder's token,
// a fence, expires_at, owner and metadata. An acquisition is one statement
// that inserts the row, or takes over a row whose lease expired or was
// released. Renew and Release compare the token. Every time is the
// database's clock (clock_timestamp() or UTC_TIMESTAMP(6)), never the
// client's, so clients with skewed clocks still agree on who holds a key.
//
// # Fences
//
// The fence strictly increases for a key in grant order, across releases,
// expiries, restarts and cleanup, and is drawn only once the key is won:
//
//   - PostgreSQL: from the sequence distlock_fence, drawn under a
//     transaction-scoped advisory lock on the key (the two-key form,
//     classid 0x73716c6b, objid hashtext(key)) that the statement holds until
//     it commits, so a grant draws its fence after the previous grant of the
//     key committed. Keys whose hashes collide only take turns.
//   - MariaDB and MySQL (no sequences, no RETURNING): a takeover is the row's
//     fence + 1, with the row locked; a new row gets the fence floor + 1
//     (table distlock_fence_floor, one row, read under a shared lock), and
//     cleanup raises the floor over every row before deleting it. The fence
//     comes back as the statement's LAST_INSERT_ID, which a trigger on
//     distlock_leases would hide: do not add one. Migrate upgrades a MariaDB
//     schema of an earlier version, whose fences came from the sequence
//     distlock_fence, with the floor above that sequence.
//
// # Rows left behind
//
// On PostgreSQL Release deletes the row; on MariaDB and MySQL it ends the
// lease but keeps the row (its fence is what the next grant goes beyond)
// until the next cleanup. The row of a lease that expired (its holder
// vanished) stays, so Inspect reports its last fence, until it is older than
// WithRetention (default 10 minutes). The cleanup runs every
// WithCleanupInterval (default 1 minute) and deletes at most WithCleanupBatch
// (default 1000) rows per statement, repeating while batches are full; or
// call Cleanup with WithManualCleanup. So the table holds the held keys plus
// the keys released or expired within about one interval plus the retention:
// nothing grows with the number of distinct keys ever locked. The sequence
// (PostgreSQL) or the floor row (MariaDB, MySQL) is one object whatever the
// number of keys. Delete rows by hand only with the key's floor raised first
// on MariaDB and MySQL (see docs/sql.md); ForceRelease is the safe way.
//
// # Timeouts and errors
//
// Every statement runs within WithRequestTimeout (default 5s), also when the
// caller's context has no deadline; this also bounds opening a connection
// for it. Connect timeouts belong to the driver's DSN: "connect_timeout"
// (seconds) for pgx, "timeout" for go-sql-driver/mysql. An unreachable
// database fails at once with the driver's dial error ("connect:
// connection refused").
//
// An acquisition's statement is not cut short by its caller's context: the
// server would finish a statement it has begun or not yet read, whatever
// the driver did with the connection, and could take the key after the
// caller was told it was not acquired. When the context ends first,
// Acquire returns its error at once, the statement ends in the background
// within the request timeout, and whatever it took is released; the
// backend's next attempt on that key waits for it.
//
// # URL
//
// Open, and distlock.Open through the scheme "mysql+table", take a URL:
//
//	mysql+table://user:password@host:port/database?param=value
//
// with sqllock's request_timeout (WithRequestTimeout) and
// go-sql-driver/mysql's DSN parameters; "timeout" is 5s unless the URL sets
// it, and any other parameter is an error matching driver.ErrInvalidOption.
// ParseURL reads a URL without connecting. PostgreSQL has no URL scheme
// here (postgres:// is pglock's advisory locks): OpenDSN opens the lease
// table from a pgx connection string, New over a *sql.DB of your own.
//
// After Close, every call returns an error matching driver.ErrClosed. So does
// every call on a *sql.DB that was closed: database/sql does not export its
// "sql: database is closed" error, but returns one value each time, which the
// package captures once from a handle it closes on purpose and matches by
// identity.
//
// # Waiting
//
// On PostgreSQL (pgx driver) the release statement sends a NOTIFY on the
// channel distlock_release with the key, and the backend LISTENs on one
// dedicated connection, opened by its first waiter and shared by all
// (driver.Notifier); waiters still poll, slowly, for expiries. Clients that
// wait for a key also queue for it in the database, on a connection of their
// own (a session advisory lock; see Watch): only the client at the head of
// the queue tries on a release, clients are served in the order they began
// to wait, and an acquisition by anyone else fails while clients queue. A
// head whose process freezes with its connection open holds the queue up
// until it resumes or the connection dies. WithoutWaitQueue turns the queue
// off. MariaDB and MySQL have no notification: there waiters poll with the
// client's jittered backoff.
//
// ForceRelease (driver.ForceReleaser) frees a key whatever token holds it
// and reports the hold it ended. On PostgreSQL it also notifies the channel
// distlock_lost with the token it removed, and a backend holding a lock
// listens there from its first grant (on the connection its waiters share):
// the holder's Grant.Lost ends at once, with driver.LossDeleted, rather than
// at its next renewal. Locks taken for a holder elsewhere
// (AcquireRequest.Unfollowed) are not followed, nor any with
// WithoutLossNotice or over a database handle of one connection.
package sqllock
