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
// New(pool, opts...) builds a backend over your own pool and validates every
// option (driver.ErrInvalidOption names the one out of range); Open builds
// one over a pool of its own from a connection string.
//
// An advisory lock lives as long as its session. The lease is enforced by the
// holder's backend: a lock not renewed within its time to live is unlocked
// (LeaseExpires). Once a lock has been held for the watch delay
// (WithWatchDelay, 5ms by default), its pinned connection is watched while no
// call uses it: a goroutine blocks reading it, so a session the server ends
// (pg_terminate_backend, a shutdown, a cut connection) is noticed within
// milliseconds and reported through Grant.Lost. A session that ended during
// the delay is noticed when the watch starts, at most 1.25 delays after the
// grant; a lock released within the delay never pays for the goroutine. A
// keepalive (a trivial query a third of the lease after the last renewal, at
// most WithKeepalive) finds a connection that broke. No statement on the
// pinned connection is cut before the lease ends, however slow the link
// (pgx closes a connection whose statement is cut, which would end a
// healthy session and its lock): a renewal that arrives within the lease
// renews, as on any store. The hard truth:
// PostgreSQL frees an advisory lock the instant its session ends, so another
// client may take the key a few milliseconds before the old holder is told
// (up to the watch delay more if the session ended within it); no lease
// covers that window, only a fence does. If the holder's process freezes, its
// session and so its lock stay until the process resumes and expires it, or
// until the server sees the connection die; a network partition keeps the
// lock until the server's TCP keepalive (tcp_keepalives_idle) ends the
// session.
//
// A renewal runs to its end on the pinned connection even when its context
// ends first (renew returns at once): pgx closes a connection whose
// statement is cancelled midway, which would end the session and the lock.
// A Release therefore waits for a renewal or keepalive in flight.
//
// Timeouts: Open sets connect_timeout to 5s (DefaultConnectTimeout) unless
// the connection string sets it, so an unreachable server fails a call
// within it, naming the dial error, even under context.Background(). Every
// request is bounded by WithRequestTimeout (5s by default; the
// request_timeout URL parameter), except a waiting acquisition, which waits
// as long as its context, and a statement on a held lock's connection,
// which has the request timeout beyond the end of the lease.
//
// Keys map to the 64-bit advisory lock id with KeyID, the first 8 bytes of
// the SHA-256 of the key's bytes, stable across versions and processes. Two
// keys that collide share one lock: they serialise each other, exclusion is
// never broken, but the holder of one blocks the other and sees it held.
// Finding a key that collides with a given key takes about 2^64 hashes, so
// keys may come from untrusted input (a tenant's, say); a caller can still
// make two keys it chooses share one lock, with a birthday search of about
// 2^32 hashes, which blocks only its own keys. With WithNamespace
// the high 32 bits are the namespace and the low 32 bits the first 4 bytes
// of the key's SHA-256 (pg_locks shows them as classid and objid); the slot
// key of a semaphore's permits is 32 bits too. A key colliding with a given
// one in 32 bits is found in about 2^32 hashes, minutes of one CPU: do not
// use a namespace, or semaphores, with names from untrusted input.
//
// Versions before the SHA-256 ids mapped keys with FNV-1a (LegacyKeyID),
// which a caller who chooses keys can collide at will; clients of the two
// schemes lock different ids for one key and would not exclude each other.
// So each database records its scheme (KeyIDs) in the table
// distlock_pg_settings, and every backend uses the recorded one: a new
// database gets KeyIDsSHA256, one an older version used keeps KeyIDsFNV1a
// until an operator moves it with every client stopped (see docs/sql.md),
// and a backend given another scheme than the database's (WithKeyIDs, the
// URL parameter key_ids) takes nothing and fails with ErrKeyIDsMismatch.
// Backend.KeyIDs tells which scheme a backend uses.
//
// Fences come from the logged sequence distlock_pg_fence, so they keep
// increasing across restarts. The holder's token, fence, session pid, time to
// live and metadata are written to the unlogged table distlock_pg_locks in
// the statement that takes the lock. Release is the bare pg_advisory_unlock:
// the row stays, and Inspect and List trust a row only while pg_locks shows
// its session holding the lock. Both objects, and the settings table, are
// created by Migrate, or on first use.
//
// What stays in the database: the sequence (one row) and, for each distinct
// key, one row of distlock_pg_locks until the periodic cleanup deletes it,
// WithRetention (10 minutes) after its lease ended, in batches of
// WithCleanupBatch every WithCleanupInterval. The next grant of the key
// overwrites it. So the table holds the keys locked within about the last
// retention period plus the held ones; it does not grow with the number of
// distinct keys ever locked, unless the cleanup is turned off
// (WithCleanupInterval(0)) and Cleanup is never called. Advisory locks
// themselves leave nothing once unlocked. WithoutHolderRows writes no rows.
//
// The holder row is the only write of an acquisition, and it costs a write
// transaction: on PostgreSQL 15 a try-lock and release with it runs at about
// half the rate of the raw advisory pair. WithDeferredHolderRows writes a
// hold's row only once the hold has lasted the watch delay, so short holds
// cost what they cost without rows, and other processes see a young hold as
// held but not described (see docs/sql.md for the rates and what each
// feature costs).
//
// ForceRelease frees a key only by ending the session that holds it
// (pg_terminate_backend), and only with WithTerminateOnForceRelease(true);
// otherwise it returns an error matching errors.ErrUnsupported.
//
// Backend.XactLock and Backend.TryXactLock take transaction-level locks in
// the backend's id space (its namespace and the database's scheme) for code
// that already runs in a pgx transaction.
//
// The backend also keeps read-write locks (driver.RWLocks: shared and
// exclusive advisory locks of the name's id, so a lock and a read-write lock
// of one name exclude each other; waiting writers' intents in a table
// readers check in the same statement) and semaphores (driver.Semaphores:
// permit i is the two-key advisory lock (slot key, i) below the limit), with
// their rows in the tables Migrate makes; see docs/sql.md. A writer's hold
// downgrades to a reader's (driver.RWDowngrader, RWMutex.Downgrade) in one
// statement on its own session, which takes the shared lock beside its
// exclusive one before unlocking that, so no other writer gets in between;
// the hold's row turns shared with the same fence and lease, and NOTIFY
// wakes the readers waiting.
//
// A semaphore's hold may count several permits (driver.WeightedPermits, for
// Semaphore.AcquireN): a hold of n takes n free slots in one statement on
// its own session, all or none (slots it found free are unlocked again in
// the same statement if fewer than n were), and renews and releases them
// together; InspectPermits reports it once, with Permits n. So that a stream
// of small requests cannot starve a large one, the rule is
// golang.org/x/sync's semaphore.Weighted: a request that waits records an
// intent in distlock_pg_permit_intents, in the order first recorded and kept
// for driver.WriteIntentTTL past its last attempt, and the statement takes
// nothing while a live intent was recorded before the request's own, or any
// live intent if it has none, even where free slots would fit it. A grant
// removes its intent and wakes the name's waiters (NOTIFY distlock_pg_sem),
// as a withdrawn intent does. A single permit without an intent keeps its
// own statement, the one of old with a look for the name's live intents
// besides (by the table's primary key). A database migrated by an earlier
// version gets the table from Migrate, which every backend runs on first
// use; where the locking role may not create tables, run Migrate (distlock
// migrate) again at deployment.
//
// Open, and distlock.Open through the schemes "postgres" and "postgresql",
// take a URL for a pool that the backend owns and closes:
//
//	postgres://user:password@host:port/database?param=value
//
// Its parameters are pglock's own:
//
//	request_timeout=5s                WithRequestTimeout
//	terminate_on_force_release=true   WithTerminateOnForceRelease
//	key_ids=sha256                    WithKeyIDs (sha256 or fnv1a)
//
// and pgx's: libpq's connection parameters (sslmode, connect_timeout in
// seconds, ...) and pgxpool's (pool_max_conns bounds the locks held at
// once). Any other name is, as in libpq, a run-time parameter sent to the
// server (application_name, search_path, ...), which refuses one it does
// not know when the pool connects. ParseURL reads a URL without
// connecting; New takes a pool you built.
package pglock
