// Package fence is the downstream side of fencing: the resource a lock
// protects rejects a write whose fence is older than the last one it
// accepted. No client-side signal can stop a holder that paused (a GC pause,
// a frozen VM) past its lease from writing after another holder took over;
// only the resource can, by comparing fences, since every backend grants
// strictly increasing fences per key.
//
// A fence equal to the last accepted is accepted: it is the same grant (no
// backend grants one fence twice for a key), and a holder may write several
// times under one grant. An older fence gets ErrStale and changes nothing.
//
//   - Write runs a fenced SQL update (UPDATE ... SET ..., last_fence = $2
//     WHERE id = $1 AND last_fence <= $2) and turns "no row changed" into
//     ErrStale.
//   - Guard checks fences in memory, for tests and single-process resources.
//   - Transport and Middleware carry a fence across HTTP in the
//     Distlock-Fence and Distlock-Fence-Key headers and reject a stale one
//     with 409 Conflict; package fencegrpc does the same for gRPC metadata
//     with FailedPrecondition. A downstream service checks fences without
//     knowing which backend issued them.
package fence
