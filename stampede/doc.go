// Package stampede protects a cache from stampedes: when a value is missing
// or expired, one caller across all replicas rebuilds it while the others
// serve the stale value or wait for the fresh one.
//
//	store, err := redisstore.New(rdb) // a go-redis client
//	cache, err := stampede.New(client, store, stampede.WithTTL(time.Minute), stampede.WithStale(time.Minute))
//	v, err := cache.Get(ctx, "report:2026-11-30", func(ctx context.Context) ([]byte, error) {
//		return runExpensiveQuery(ctx)
//	})
//
// The rebuilder is chosen by a distlock lock, of the client passed to New
// (any backend), on the key KeyPrefix+key. Entries live in a Store: package
// redisstore keeps them in Redis, MemoryStore in the process; any store that
// can compare a fence and write in one step can implement Store.
//
// # What Get does
//
//   - Fresh value (before its TTL): returned at once; no lock is touched.
//   - Stale value (past its TTL, within the staleness bound of WithStale):
//     returned at once. The caller also makes one TryLock: the one that gets
//     the lock refreshes the value in the background, the others do nothing
//     more. Nobody waits while a stale value is servable. The refresh runs in
//     the background rather than inline so that even the caller that won the
//     lock answers at stale-read speed; the price is that its errors reach no
//     caller and go to OnError instead.
//   - No value, or one past its staleness bound: the callers of one process
//     share one rebuild (and its outcome, value or error), which takes the
//     lock, waiting up to WithWait if another process holds it, and reads
//     again. A rebuild that waited finds the value that the holder wrote and
//     returns it; one that finds none loads and returns what it loaded. The
//     wait ends soon after the holder releases, through the lock store's
//     release notice (Redis pub/sub, channels in memory) where the backend
//     has one. Each caller waits for the shared rebuild only as long as its
//     own context allows; the rebuild goes on for the callers still waiting
//     and is cancelled when none is left.
//
// # The guarantee
//
// For each key, at most one load runs at a time across every replica that
// shares the lock store, for as long as the rebuilder holds its lock: under
// the default lock options that lock is renewed by distlock's watchdog for as
// long as the load runs, so one load per miss. If the rebuilder loses its
// lock (a pause or partition past its lease, an operator's ForceRelease),
// another caller may start a second load while the first still runs. Two
// things limit the damage: the first load's context is cancelled when its
// lock is known lost, and every write carries the lock's fence, which the
// store compares atomically, so a lost rebuilder's late write never replaces
// a value written under a later grant of the lock. Its value is still
// returned to its own caller: it is fresh from the source. The fences of one
// lock key are only comparable with each other, so every replica must use
// the same lock store; a lock store that loses its fence counter (a Redis
// without persistence that restarts) has its lower fences refused until the
// entries written before expire at their staleness bound.
//
// Once an entry has passed its staleness bound its fence is no longer
// compared (redisstore's entry has expired): a rebuilder that lost its lock
// checks the lock right before writing, which leaves only a process pause
// between that check and the write.
//
// # Failures
//
//   - A load that fails or panics changes nothing in the store: a stale value
//     stays and is served until its bound. A panic is recovered and becomes
//     an error matching ErrLoadPanicked, with the stack.
//   - The callers that shared the failed rebuild get its error. Other
//     processes waiting for the lock find no value when it is released, so
//     the next in line loads in turn: loads stay one at a time, and each
//     caller gets a value, the error of its own process's load, or the end
//     of its wait.
//   - A background refresh's error goes to OnError; the stale value keeps
//     being served, and the next stale read after the lock is free tries
//     again.
//   - A store read that fails is returned to the caller; a store write that
//     fails after a load goes to OnError and the loaded value is returned.
//
// Errors are not cached (no negative caching): a key whose load keeps failing
// is loaded again, one caller at a time, on each miss. TTLs can be jittered
// with WithJitter so that keys written together do not expire together.
//
// # Counters
//
// Stats counts hits, stale serves, misses, misses that joined a rebuild of
// their process, rebuilds that waited for another's lock, loads, load
// failures and refused writes since New; telemetry.NewStampedeCollector
// exports them to Prometheus.
//
// # Lifetime
//
// Close cancels background refreshes, waits for them to release their locks,
// and makes later calls fail with distlock.ErrClosed. It closes neither the
// client nor the store. Nothing is left in the lock store: every rebuild lock
// is released when its load ends. The store keeps each entry until its
// staleness bound (redisstore: by a Redis TTL).
package stampede
