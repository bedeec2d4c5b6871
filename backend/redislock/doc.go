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
// After Close, and once the client under the backend was closed (go-redis's
// ErrClosed, rueidis's ErrClosing), every call returns an error matching
// driver.ErrClosed at once.
//
// # Keys
//
// A lock key K lives under three Redis names that share the hash tag {K}, so
// that they sit in one Cluster slot and one script can touch them all:
//
//	<prefix>{K}        the holder's token (with "\n" appended once another token was refused), with the lease as time to live
//	<prefix>{K}:fence  the fence of the last grant, living a minute beyond the lease of the last grant or renewal
//	<prefix>{K}:meta   the holder's metadata as JSON, with the lease as time to live
//
// The prefix is "distlock:" unless WithPrefix says otherwise. In K, "\" is
// written "\\" and "}" is written "\]", so that the tag always ends where K
// ends.
//
// Release deletes the lock and its metadata; only the fence counter stays,
// and it expires a minute after the lease of the last grant or renewal (or,
// if a clock stepped back left it ahead of the server's clock, once the
// clock has passed it). Every key the backend writes therefore expires:
// locking many distinct names leaves at most the names used within the last
// lease plus a minute, and nothing grows without bound. Counters written by
// earlier versions of this package have no expiry until their name is
// locked again.
//
// # Requests
//
// Each request is one Lua script, run by its SHA1 (EVALSHA) and loaded on
// NOSCRIPT; they need Redis 5.0 or later. Acquire does SET NX PX and, in the
// same script, advances the fence counter and sets its expiry (one SET GET
// PX on Redis 7.0 or later, GETSET and PEXPIRE before); a retry by the token
// that already holds gets the same fence, and a refused attempt marks the
// holder's value. Renew compares the token, then PEXPIREs the lock and its
// metadata and extends the counter's expiry, never shortening it. Release
// compares the token, then DELs and, if the value was marked, PUBLISHes a
// release notice on the channel <prefix>{K}: a release nobody waited for
// publishes nothing. ForceRelease (driver.ForceReleaser, for operators)
// deletes the lock whatever token holds it and returns what it held, with
// the same notice. Tokens may not contain "\n".
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
// Backend implements driver.Notifier. All waiters of a backend share one
// subscription connection; channels are refcounted by their waiters, and a
// notice wakes the longest waiting waiter of the key in this process. A key
// is subscribed only after it has had a waiter for 5ms (most waits end
// sooner), and stays subscribed for a second after its last waiter left.
// When a subscription is confirmed, a waiter re-checks the key, so no
// release between its last attempt and the subscription is missed. Leases
// that expire publish nothing; the client's backoff poll catches them, and
// lost notices.
//
// On Cluster the notices use regular pub/sub, not sharded pub/sub: the one
// subscription connection then serves every slot, at the cost of each notice
// crossing the cluster bus to every node. Releases nobody waited for send no
// notice at all.
package redislock
