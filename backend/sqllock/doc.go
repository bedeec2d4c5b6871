// Package sqllock is a distlock backend on a lease table over database/sql.
// The same code runs on PostgreSQL (driver "pgx") and MariaDB (driver
// "mysql"); what differs is the SQL of a Dialect, kept in embedded files.
//
// One row per key (schema in Migrate and in docs/sql.md): the holder's token,
// a fence, expires_at, owner and metadata. An acquisition is one statement
// that inserts the row, or takes over a row whose lease expired or was
// released, and returns the holder's token and fence. Renew and Release
// compare the token. Every time is the database's clock (clock_timestamp()
// or UTC_TIMESTAMP(6)), never the client's, so clients with skewed clocks
// still agree on who holds a key.
//
// Fences come from one database sequence, so they strictly increase for a key
// across releases, expiries, restarts and the deletion of its row. Release
// deletes the row; rows of leases that expired (their holder vanished) stay,
// so Inspect reports their last fence, until they are older than
// WithRetention, then go in bounded batches (WithCleanupInterval,
// WithCleanupBatch, or Cleanup).
//
// On PostgreSQL (pgx driver) the release statement sends a NOTIFY on the
// channel distlock_release with the key, and the backend LISTENs on one
// dedicated connection, opened by its first waiter and shared by all
// (driver.Notifier); waiters still poll, slowly, for expiries. MariaDB has
// no notification: there waiters poll with the client's jittered backoff.
package sqllock
