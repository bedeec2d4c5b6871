// Package redislock is the distlock backend for one Redis deployment: a single
// node, a primary with replicas under Sentinel, or a Redis Cluster.
//
// Pass the client you already have, go-redis (New, any
// redis.UniversalClient) or rueidis (NewRueidis); the lock logic is the same
// for both. Or let Open build a rueidis client from a URL, which is what
// distlock.Open does for the schemes redis, rediss, redis-sentinel and
// redis-cluster after a blank import of this package:
//
//	import _ "github.com/distlock/distlock/backend/redislock"
//	client, err := distlock.Open(ctx, "redis://127.0.0.1:6379/0")
//
// rueidis is the default there because it pipelines concurrent requests on
// shared connections, which is faster under concurrency.
//
// # Connecting and timeouts
//
// New and NewRueidis ask the server for its version (INFO server) and fail,
// naming the version found, if it is older than MinVersion (5.0); they also
// fail, naming the dial error, if the server cannot be reached. Open does
// the same after it connects. Every request is bounded by its context and by
// the request timeout (WithRequestTimeout, URL parameter request_timeout,
// default 5s), whichever ends first, so an unreachable Redis can neither
// stall the watchdog past the lock's validity nor hang a call made with
// context.Background(). Open's client gives up a connection attempt after
// the dial timeout (WithDialTimeout, URL parameter dial_timeout, default 5s)
// or ctx's deadline if sooner; the clients passed to New and NewRueidis keep
// their own dial timeouts (5s by default in both libraries).
//
// # Waiting for replicas
//
// WithReplicaAck (URL parameters replica_ack and replica_ack_timeout)
// confirms a grant, and a renewal, only once that many replicas
// acknowledged it: WAIT follows the write on the connection that made it
// (on a Cluster, to the master of the key's slot). A grant they did not
// acknowledge in time is released and refused (ReplicaAckError, matching
// driver.ErrNotAcquired). It narrows, and does not close, the window in
// which a failover to a replica that missed a grant admits a second holder.
//
// # Losing a lock
//
// A holder learns at once that its lock was force-released (a notice on
// the lost channel). A backend from Open, on Redis 6 and later, also reads
// every key held for 100 ms with client-side tracking, so that a DEL, an
// eviction, an expiry, a failover that lost the key or another client's
// write ends the grant's Lost context within a round trip, with the reason
// deleted or taken (WithoutLossTracking, URL parameter track_loss=false,
// turns it off). Otherwise a loss is found at the next renewal.
//
// After Close, and once the client under the backend was closed (go-redis's
// ErrClosed, rueidis's ErrClosing), every call returns an error matching
// driver.ErrClosed at once.
//
// # Keys
//
// A lock key K lives under Redis names that share the hash tag {K}, so that
// they sit in one Cluster slot and one script can touch them all:
//
//	<prefix>{K}        the lock (below), with the lease as time to live
//	<prefix>{K}:fence  the fence of the last grant, living a minute beyond the lease of the last grant or renewal
//	<prefix>{K}:meta   the holder's metadata as JSON, with the lease as time to live
//	<prefix>{K}:q      the waiters' queue: a sorted set of entries by arrival
//	<prefix>{K}:qt     the same entries by the time they expire unless refreshed
//	<prefix>{K}:qm     the metadata of queued waiters that have some
//	<prefix>{K}:watchers  the watches of the key (Watch, below)
//
// The lock's value is the holder's token, followed by "\n" once a waiter
// queued for the key (its release then passes the key on). An entry of the
// queue is "<client id>|<time to live in ms>|<token>".
//
// The prefix is "distlock:" unless WithPrefix says otherwise. In K, "\" is
// written "\\" and "}" is written "\]", so that the tag always ends where K
// ends.
//
// Release deletes the lock and its metadata; only the fence counter stays,
// and it expires a minute after the lease of the last grant or renewal (or,
// if a clock stepped back left it ahead of the server's clock, once the
// clock has passed it). The queue's keys live as long as its longest-lived
// entry. Every key the backend writes therefore expires: locking many
// distinct names leaves at most the names used within the last lease plus a
// minute, and nothing grows without bound. Counters written by earlier
// versions of this package have no expiry until their name is locked again.
//
// The backend keeps semaphores natively (driver.Semaphores, for
// distlock's Client.Semaphore): a semaphore S's permits are a sorted set by
// expiry under the tag {S}, with its holders, fence counter and watchers
// beside it; each operation is one script on the server's clock. Its
// number of permits (<prefix>{S}:sem:limit) stays until deleted: it is the
// semaphore's setting, not a hold.
//
// A hold may count several permits (driver.WeightedPermits, for
// Semaphore.AcquireN): its count is kept by token in <prefix>{S}:sem:weights
// (only for counts above one), and the acquire script sums the live holds'
// counts. So that a stream of small requests cannot starve a large one, the
// rule is golang.org/x/sync's semaphore.Weighted: a request that waits
// records an intent in <prefix>{S}:sem:intents, in the order first recorded,
// and in <prefix>{S}:sem:lapses, by when it lapses (driver.WriteIntentTTL
// after its request's last attempt); no request is granted while an intent
// recorded before its own lives, or any intent if it has none, even where
// free permits would fit it. A grant removes its request's intent and wakes
// the watchers, as a withdrawn intent does. A single permit with no weighted
// hold and no intent costs what it did, one script, with one EXISTS more
// (the release one HDEL more).
//
// The backend keeps read-write locks natively too (driver.RWLocks, for
// distlock's Client.RWMutex): a lock R's holds are a sorted set by expiry
// under the tag {R} (<prefix>{R}:rw), with holders, write intents, fence
// counter and watchers beside it; each operation is one script on the
// server's clock. Nothing stays after release but the fence counter, which
// expires a minute after the last lease, and intents, which lapse within
// driver.WriteIntentTTL. A writer's hold downgrades to a reader's
// (driver.RWDowngrader, RWMutex.Downgrade) in one script that rewrites the
// hold's mode, keeping its fence, expiry and metadata, and wakes the
// watchers, so no other writer gets in between.
//
// # Requests
//
// Each request is one Lua script, run by its SHA1 (EVALSHA) and loaded on
// NOSCRIPT; they need Redis 5.0 or later. Acquire (one attempt, which never
// queues) does SET NX PX and, in the same script, advances the fence
// counter and sets its expiry (one SET GET PX on Redis 7.0 or later, GETSET
// and PEXPIRE before); a retry by the token that already holds gets the same
// fence. A step of a waiter does the same on a free key, and otherwise
// queues the waiter or refreshes its entry. Renew compares the token, then
// PEXPIREs the lock and its metadata and extends the counter's expiry,
// never shortening it. Release compares the token, then passes the key on
// (below) or, if nobody queued, DELs it. ForceRelease (driver.ForceReleaser,
// for operators) deletes the lock whatever token holds it, returns what it
// held, and passes the key on too. Tokens may not contain "\n".
//
// # Fencing
//
// The fence of a grant is max(last fence + 1, the server's TIME in
// microseconds). While Redis keeps its data, fences increase by at least one
// per grant. When it loses the counter, restarted without persistence or
// failed over to a replica that missed the latest writes, the next fence is
// the server's clock in microseconds, which is above every earlier fence as
// long as the clocks of the servers involved do not step backwards and agree
// within the time the restart or failover takes. The same holds once the
// counter has expired: it expires only after the lease of the last grant
// and once the clock has passed the counter, by the server's own clock. A counter runs ahead of the
// clock only when one key is granted more than once per microsecond, which a
// round trip per grant rules out. Fences are therefore large numbers (about
// 1.8e15 in 2027), and still strictly increasing per key.
//
// The lock itself is as safe as Redis replication: a failover to a replica
// that missed the grant can hand the key to a second holder while the first
// still believes it holds it. Fencing is what protects the resource then.
//
// # Waiting
//
// Backend implements driver.Waiter: waiters of every client queue for a key
// in Redis, first come, first served, and a release wakes only the waiter
// whose turn it is.
//
//   - A wait starts with a plain attempt, as Acquire makes, unless a waiter
//     of the same backend waits for the key or had to queue for it within
//     the last second. A backend lines up its own waiters for a key; only
//     the first of them queues in Redis: if the key is held, its step queues
//     it, once the backend listens for notices (below).
//   - An entry expires unless its waiter refreshes it (WithWaiterTimeout,
//     default 1s), which a live waiter does every fifth to third of that
//     time, jittered; the refresh also catches a lost notice. The first
//     waiter looks again when the holder's lease runs out.
//   - A release of a queued-for key passes it to the first live waiter, in
//     the release's own script: it grants the waiter the key and publishes
//     the waiter's token and fence on that waiter's client's channel,
//     <prefix>notify:<client id>, one notice to the one client concerned;
//     the waiter holds the key without a round trip of its own, its lease
//     counted from its last refused step, which ran before the grant. A
//     waiter of the releasing backend gets the grant in process instead.
//     PUBLISH says whether the client listens; if nobody heard the notice
//     (the waiter's process died, closing its connections), the next waiter
//     gets the key in the same script.
//   - A release by a backend whose next waiter for the key is its own hands
//     the key straight to it in the same script; while other clients'
//     waiters are queued it does so at most 16 times in a row, then passes
//     the key to the first of them, so a client with many waiters cannot
//     starve the others.
//   - A waiter that gives up (its wait ended, Close) leaves the queue in one
//     script, which frees the key if it was granted to it meanwhile.
//   - All waiters of a backend share one subscription, to one channel,
//     subscribed when a waiter first has to queue and kept until Close: one
//     connection, or on a Cluster one per master, so that a notice comes
//     from the node that runs the release (the cluster bus holds small
//     messages back now and then) and PUBLISH, which on a Cluster counts
//     only the listeners connected to the node that runs it, counts every
//     client. A waiter queues only once the subscription is confirmed, so
//     its turn is never announced unheard; until then it polls (5-100 ms).
//     A broken subscription connection is re-established and every waiter
//     looks again.
//
// Backend also implements driver.Notifier (Watch), for callers that cannot
// queue, such as Redlock, whose grant no one node can give: a watch enters
// "<backend id>|<watch token>" in <prefix>{K}:watchers, refreshed as a
// queued entry is, and every release of K through a backend built
// WithWatchedReleases (Redlock's nodes), every force release and every
// release to a queued waiter publishes each watch token on its backend's
// channel, over the same subscription. WithWatchedReleases costs each
// release one ZRANGE of an absent key more while nobody watches.
//
// What a dead waiter costs: a waiter whose process died is passed over at
// once. One whose host vanished without closing its connections (or whose
// process froze) at the moment its turn comes is still heard and is granted
// the key, which is free again when that lease runs out, exactly as if it
// had been the holder; one that vanished while others were ahead of it is
// dropped once its entry expires, after the waiter timeout.
//
// A key whose holder's lease ran out, without a release, is free for the
// first attempt; the queued waiters take it on their next step. Clients of
// earlier versions of this package do not queue and take a free key when
// they find it; while both versions share a key, each one's waiters learn
// of the other's releases by polling.
package redislock
