// Package occ holds the lock-free side of the toolbox: optimistic
// concurrency control. Instead of excluding other writers, a writer reads a
// version, computes, and writes only if the version is unchanged; a conflict
// is retried with bounded, fully jittered exponential backoff.
//
// Prefer it to a lock when conflicts are rare and the work can be redone:
// no lock to lose, no lease to renew. Use a lock (and a fence) when the work
// has side effects outside the row that cannot be redone.
//
//   - Retry runs a function until it succeeds, fails with an error other than
//     ErrConflict, runs out of attempts, or its context ends.
//   - UpdateVersion runs UPDATE ... SET ..., version = version + 1
//     WHERE id = $1 AND version = $2 and turns "no row changed" into
//     ErrConflict, over database/sql (SQL) or pgx (Pgx).
//   - Value is an in-memory value with a version, for the same pattern inside
//     one process, and Update is its read-modify-CAS loop.
package occ
