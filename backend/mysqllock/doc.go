// Package mysqllock is a distlock backend on MySQL and MariaDB named locks
// (GET_LOCK), over github.com/go-sql-driver/mysql.
//
// A lock is a named lock taken with GET_LOCK on a connection that is pinned
// for as long as the lock is held: it is taken out of the database/sql pool
// and goes back only after RELEASE_LOCK freed the name, or is closed, so a
// pooled connection never carries a lock to its next user. Each held lock
// therefore needs one connection; a handle with no free connection gives a
// clear error (ErrPoolExhausted) within WithPoolWait instead of hanging.
// Waiting clients wait in GET_LOCK, in the server's own queue of the name,
// with the remaining wait as its timeout (in seconds to the microsecond,
// which MariaDB honours; a server that rounds it is covered by waiting again,
// or by the kill below). When the caller's context ends, or Close begins, the
// wait is ended from another connection of the handle with KILL QUERY, and
// the waiting connection is closed, so that nothing waits on and a grant
// that raced with the end dies with its session.
//
// New(db, opts...) builds a backend over your own handle and validates every
// option (driver.ErrInvalidOption names the one out of range); Open builds
// one over a handle of its own from a URL. The handle must be in autocommit
// mode (the default) and should set interpolateParams=true (Open does).
//
// # Guarantee
//
// A named lock lives as long as its session: the server frees it the instant
// the session ends (KILL, a restart, wait_timeout, a cut connection), and
// nothing else frees it. The lease is enforced by the holder's backend: a
// lock not renewed within its time to live is released (LeaseExpires). The
// holder learns that its session ended at the next keepalive (a COM_PING
// every third of the lease, at most WithKeepalive apart, 1s by default) or
// the next renewal: that is the window in which another client may already
// hold the key while the old holder is not yet told: up to one keepalive
// interval (measured: 50ms after a KILL with WithKeepalive(50ms), three runs
// of TestMariaDB/KilledHolderReportedLost). No lease covers that
// window; only the fence does. If the holder's process freezes, its session
// and so its lock stay until the process resumes and expires it, or until
// the server closes the connection (wait_timeout, TCP keepalive).
//
// # Fences
//
// The fence comes from the holder table's row of the key, advanced in the
// statement that takes the lock, only if GET_LOCK took it, with
// LAST_INSERT_ID(GREATEST(fence + 1, clock)) where clock is the server's
// UTC clock in microseconds since 1970 (so fences are large numbers, not
// 1, 2, 3). The row is InnoDB and written in the same autocommit statement,
// so fences strictly increase per key in grant order and survive restarts.
// A row that Cleanup deleted starts again at the clock, above every fence it
// had, as long as the server's clock does not go back by more than
// WithRetention (10 minutes). The SQL is the subset MySQL 8 and MariaDB both
// run (no sequence, no RETURNING); the tests run on MariaDB 10.11 only.
//
// # What stays in the database
//
// The table distlock_mysql_locks (created by Migrate, or on first use): one
// row per key, holding the fence of its last grant and its holder record
// (token, session id, since, lease end, owner, business id, labels). Release
// is the bare RELEASE_LOCK: the row stays, Inspect and List trust it only
// while IS_USED_LOCK shows its session holding the name, and the next grant
// overwrites it. The periodic cleanup deletes, every WithCleanupInterval (1
// minute), up to WithCleanupBatch (1000) rows whose lease ended more than
// WithRetention ago and whose name is free; so the table holds the keys
// locked within about the last retention period plus the held ones. Named
// locks themselves leave nothing once released.
//
// # Names
//
// A key maps to its lock name with LockName: "dl:" and the key when it is
// short and plain (lower-case ASCII letters, digits, / . _ - :), else "dl#"
// and its SHA-256 in lower-case base32, since names are at most 64
// characters and compared without regard to case. Keys that differ only in
// case, or only after the 64th character, are different locks.
//
// ForceRelease frees a key only by ending the session that holds it (KILL
// CONNECTION), and only with WithKillOnForceRelease(true); otherwise it
// returns an error matching errors.ErrUnsupported.
//
// # Timeouts
//
// Every request is bounded by WithRequestTimeout (5s by default; the
// request_timeout URL parameter), except a waiting acquisition, which waits
// as long as its context. A statement on a pinned connection that runs out
// makes the driver close the connection, which ends the session and frees
// the lock, so a renewal runs to its end (bounded by the request timeout)
// even when its caller's context ends first. Open dials with the DSN's
// timeout, 5s (DefaultConnectTimeout) unless the URL sets "timeout", and
// pings the server, so an unreachable server fails in Open naming the dial
// error.
//
// # Pitfalls
//
//   - A proxy that multiplexes statements over server sessions (ProxySQL
//     with multiplexing on, a transaction-mode router) or a pool that resets
//     sessions between uses (COM_RESET_CONNECTION, COM_CHANGE_USER) moves or
//     frees named locks behind the holder's back: connect directly, turn
//     multiplexing and resets off for distlock's user, or use the lease
//     table (sqllock, mysql+table://).
//   - wait_timeout ends an idle session and its locks; the keepalive keeps a
//     pinned session busier than that unless wait_timeout is about a second.
//   - MariaDB's max_statement_time ends any statement, a lock wait
//     included: a wait longer than it fails with the statement timeout.
//     MySQL's max_execution_time applies to SELECTs only; the wait runs in an
//     INSERT and is not affected.
//   - A waiting GET_LOCK statement holds a shared metadata lock on
//     distlock_mysql_locks: an ALTER TABLE of it waits for every waiter, and
//     blocks every statement on the table meanwhile.
//   - distlock doctor mysql://... checks the first three.
//
// Open, and distlock.Open through the scheme "mysql", take a URL:
//
//	mysql://user:password@host:port/database?param=value
//
// with mysqllock's own parameters
//
//	request_timeout=5s            WithRequestTimeout
//	keepalive=1s                  WithKeepalive
//	pool_wait=1s                  WithPoolWait
//	kill_on_force_release=true    WithKillOnForceRelease
//	max_open_conns=N              sql.DB.SetMaxOpenConns (default unlimited)
//
// and go-sql-driver/mysql's DSN parameters (timeout, tls, ...); any other
// is an error matching driver.ErrInvalidOption. ParseURL reads a URL
// without connecting. The lease table on the same servers is sqllock's
// mysql+table://.
package mysqllock
