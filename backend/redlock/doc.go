// Package redlock is the distlock backend for Redlock: one lock over N
// independent Redis nodes (no replication between them), held while a
// majority of them hold it.
//
// Build it over clients you already have, one per node, go-redis (New) or
// rueidis (NewRueidis), or let Open build rueidis clients from a URL, which
// is what distlock.Open does for the scheme redlock after a blank import:
//
//	import _ "github.com/distlock/distlock/backend/redlock"
//	client, err := distlock.Open(ctx, "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379/0")
//
// There must be an odd number of distinct nodes, at least 3; a majority is
// N/2+1. Each node runs the scripts of package redislock (its
// redislock.Backend), so a node holds exactly what a single-Redis lock
// holds; see that package for the keys.
//
// # Requests
//
// Acquire sends redislock's one-attempt acquire to every node at once, with
// the same token and time to live, and waits for each reply at most the
// node timeout (WithNodeTimeout; by default a tenth of the lease, at least
// 50ms, at most the request timeout, and never past the validity). The lock
// is acquired if a majority granted it and the validity
//
//	lease − (time since the requests were sent) − (lease×0.01 + 2ms)
//
// is still positive (WithDrift sets the margin). distlock's client counts
// the same validity: the grant says when the requests were sent. Otherwise
// Acquire releases the key on every node that granted it or whose reply did
// not come, and fails: driver.ErrNotAcquired when other holders kept it
// from a majority, or the nodes' failures (one *NodeError each, naming its
// address) when too many nodes failed for a majority to grant it.
//
// Renew renews on every node at once and succeeds if a majority renewed;
// the client counts the new validity from when it sent the renewal. If a
// majority can no longer renew because the nodes say the token does not
// hold the key there, the lock is lost (driver.ErrNotHeld). Release
// releases on every node at once; it succeeds once no majority holds the
// key for the token, and a node that did not answer frees it when its time
// to live runs out. Inspect, List and ForceRelease ask every node and merge
// their answers: a key is held if a majority holds it.
//
// # Waiting
//
// A Redlock grant exists only across a majority, so no node's own queue
// can grant it, and Backend does not implement driver.Waiter. It
// implements driver.Notifier (Watch): a waiter enters a watch of the key on
// every node (redislock's Watch), and every node publishes a notice when
// the key is released or force released there. distlock's client lines up
// its own waiters for a key, so only the first one watches and tries; a
// release by the same client wakes its next waiter at once.
//
// Every process waiting for a key hears the same release, so Watch guards
// against a herd: it fires once a majority of the nodes sent a notice (the
// undoing of an attempt without a majority frees the key on fewer, and is
// left to a later, random wake), after a random delay of up to four round
// trips of an acquire, so that the first to try usually wins every node
// before the next asks. Between notices the client polls, 5 to 100ms fully
// jittered, for a holder whose lease ran out, which frees no notice.
//
// # Fencing
//
// The fence of a grant is the largest of the fences that the granting
// nodes returned; each is redislock's time-floored counter, max(last + 1,
// the node's clock in µs). Any two majorities share a node, and that node's
// fence grows from one grant to the next as long as it kept its counter (or
// its clock did not step back). The largest fence of the earlier grant may
// have come from another node, though, so Redlock's fence strictly
// increases from one grant of a key to the next when both hold:
//
//   - the nodes that granted the earlier grant keep their data (a majority
//     of them suffices when the nodes' clocks agree), and
//   - the nodes' clocks agree to within the time between the two grants
//     (a release and an acquire: at least two round trips).
//
// Nodes whose clocks are apart by more than that can give a later grant,
// by a majority without the node whose clock is ahead, a lower fence than
// the one before (TestFenceFollowsTheNodeAhead shows it with a counter set
// ahead). A node restarted without persistence loses its counter and its
// locks: its next fence comes from its clock, but the lock itself may then
// be granted to a second holder (below).
//
// # What Redlock does not promise
//
// Redlock assumes bounded clock drift, bounded network delay and bounded
// process pauses. A node restarted without persistence (or with fsync
// every second, and crashed) forgets the locks it held: if it was part of
// a holder's majority, another client can get a majority at once while the
// first still believes it holds. A node whose clock jumps forward expires
// its locks early, with the same effect. A holder paused past its validity
// (a GC, a stopped VM) goes on after its lock was given to another. Only a
// fence checked by the resource closes these gaps: pass Lock.Fence() with
// every write and let the resource refuse a fence lower than one it has
// seen (package fence). Keep a crashed node down for at least the longest
// lease in use before it rejoins, or run the nodes with appendfsync always.
// docs/redlock.md sets out the debate and measures these cases.
//
// # Timeouts and Close
//
// Every request to a node is bounded by its context and the request timeout
// (WithRequestTimeout, URL request_timeout, default 5s); Acquire and Renew
// also by the node timeout. Open's clients give up a connection attempt
// after the dial timeout (WithDialTimeout, URL dial_timeout, default 5s).
// New, NewRueidis and Open need every node reachable, and fail naming each
// node that is not. After Close every call returns an error matching
// driver.ErrClosed.
package redlock
