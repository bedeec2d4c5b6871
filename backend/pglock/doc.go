// Package pglock is a distlock backend on PostgreSQL advisory locks.
//
// A lock is a session-level advisory lock (pg_try_advisory_lock, or
// pg_advisory_lock for a native wait in the database's own queue) taken on a
// connection that is pinned for as long as the lock is held: it is taken out
// of the pgxpool pool and goes back only after pg_advisory_unlock succeeded,
// or is destroyed, so a pooled connection never carries a lock to another
// caller. Each held lock therefore needs one connection of the pool; a pool
// with no free connection gives a clear error (ErrPoolExhausted) within
// WithPoolWait instead of hanging.
//
// An advisory lock lives as long as its session. The lease is enforced by the
// holder's backend: a lock not renewed within its time to live is unlocked
// (LeaseExpires), and a keepalive on the pinned connection (a trivial query
// every third of the lease, at most WithKeepalive apart) reports the lock
// lost through Grant.Lost as soon as the session is found dead: terminated by
// pg_terminate_backend, the server restarted, the connection cut. The hard
// truth: if the holder's process freezes, its session and so its lock stay
// until the process resumes and expires it, or until the server sees the
// connection die; a network partition keeps the lock until the server's TCP
// keepalive (tcp_keepalives_idle) ends the session.
//
// Keys map to the 64-bit advisory lock id with KeyID, FNV-1a 64 over the key's
// bytes, stable across versions and processes. Two keys that collide share
// one lock: they serialise each other, exclusion is never broken. With
// WithNamespace the high 32 bits are the namespace and the low 32 bits a
// 32-bit FNV-1a hash of the key (pg_locks shows them as classid and objid).
//
// Fences come from the logged sequence distlock_pg_fence, so they keep
// increasing across restarts. The holder's token, fence, session pid, time to
// live and metadata are written to the unlogged table distlock_pg_locks in
// the statement that takes the lock. Release is the bare pg_advisory_unlock:
// the row stays, and Inspect and List trust a row only while pg_locks shows
// its session holding the lock. The next grant of the key overwrites the row,
// and a bounded periodic cleanup (WithCleanupInterval, WithRetention) deletes
// rows nobody holds. Both objects are created by Migrate, or on first use.
//
// XactLock and TryXactLock take transaction-level locks in the same id space
// for code that already runs in a pgx transaction.
//
// Open registers the schemes "postgres" and "postgresql": the URL is a pgx
// connection string for a pool that the backend owns and closes.
package pglock
