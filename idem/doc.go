// Package idem provides idempotency keys over distlock: Keeper.Do runs a
// function at most once to completion per key, across every replica that
// shares the Keeper's lock store and record Store, and returns the recorded
// result to every duplicate.
//
// # States of a key
//
//   - In progress: an attempt holds the distlock lock KeyPrefix+key, with its
//     lease, watchdog, loss notice and fence. Concurrent duplicates wait for
//     it (up to WithWait and their context) instead of running.
//   - Succeeded or failed: a Record (the request's SHA-256, the result, a
//     failed flag, the attempt's fence) is in the Store until its retention
//     (WithRetention) ends. Duplicates get it at once, without a lock. An fn
//     decides whether its failure is recorded (return Fail) or retryable
//     (any other error: nothing is recorded and the next call runs fn).
//   - A duplicate whose request differs from the recorded one gets an error
//     matching ErrConflict, never the other request's result.
//
// # The guarantee, exactly
//
// Do reads the record; on a miss it takes the key's lock, reads again, runs
// fn with the lock's fence and a context that ends if the lock is lost, and
// records the result with a conditional write that refuses to replace any
// live record; then it releases the lock. So:
//
//   - At most one completed result is recorded per key and retention, and
//     every caller that gets a result gets that one.
//   - fn runs once for any set of duplicates that overlap in time or come
//     after the record, as long as no attempt loses its lock mid-run or
//     fails to write its record (a store error is returned, nothing is
//     recorded, and the next duplicate runs fn again).
//   - An attempt that crashes (a killed process, a lost network) or whose
//     lock is lost mid-run holds the key until its lease ends (session
//     backends such as pglock free it as soon as the session ends); the next
//     duplicate then runs fn again with a higher fence. The crashed attempt's
//     side effect may or may not have happened. It is exactly-once only if
//     the side effect is itself idempotent or fenced: the resource refuses a
//     write whose fence is below the last it accepted (package fence), so a
//     paused attempt that wakes after the retry cannot overwrite it. A lost
//     lock during fn never records a result (the error matches
//     ErrSuperseded and distlock.ErrLockLost).
//   - Without fencing, a store that loses writes (Redis without AOF after a
//     restart, an asynchronous replica promoted) loses records, and a
//     retried request runs again.
//
// The transactional forms, pgstore.Store.DoTx and mysqlstore.Store.DoTx,
// run fn in the caller's transaction and write the record in it, committing
// while the lock is held: the business write and the record commit together
// or not at all.
//
// # Observability
//
// Stats counts executions, replays, conflicts, waits, recorded failures and
// superseded results (telemetry.NewIdemCollector exports them to
// Prometheus); WithLogger warns of conflicts and superseded results.
// The attempts' locks go through the distlock.Client, so its Observer
// (package telemetry) sees their acquisitions, waits, losses and store calls
// under the keys KeyPrefix+key.
//
// Stores: MemoryStore here (tests, one process), redisstore (Redis),
// pgstore (PostgreSQL) and mysqlstore (MySQL, MariaDB). Package idemtest is
// the suite they pass. OpenURL opens the Store in the store a lock
// backend's URL names (redis://, postgres://, mysql://), as the store
// packages register them.
package idem
