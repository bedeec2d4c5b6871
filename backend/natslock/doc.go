// Package natslock is a distlock backend on a NATS JetStream Key-Value
// bucket: every acquisition, renewal and release is one conditional write
// (compare-and-set on the key's revision), the store expires a hold by
// itself (per-key time to live), and the fence is the stream sequence of
// the write that granted the hold.
//
//	b, err := natslock.New(nc, "locks") // a *nats.Conn you own
//	c, err := distlock.Open(ctx, "nats://127.0.0.1:4222?bucket=locks")
//
// # Guarantee
//
// A key is held by at most one token at a time, as far as the bucket's
// stream is consistent: a grant is a write conditional on the key having
// no message or a marker as its last one, a renewal and a release are
// writes conditional on the hold's own revision, and the stream applies
// each condition where it orders the writes (its leader, with the write
// replicated to a quorum of a replicated bucket before it is acknowledged).
// The servers' clocks expire a hold, so a hold lasts at least its lease on
// the servers' clocks; the holder's validity, counted on its own clock from
// before its request, ends first while the clocks run at about the same
// rate. Nats-TTL counts whole seconds: a lease is kept for whole seconds,
// rounded up (at least one), and expires within about a second after that,
// when the server's expiry runs; the holder's validity stays the lease it
// asked for.
//
// # Fences
//
// A grant's fence is the stream sequence of the write that granted it.
// Sequences of a stream only grow, through releases, expiries, force
// releases, restarts of file storage and leader changes of a replicated
// stream, so fences strictly increase per key (and across keys of one
// bucket). They start again from 1 only if the bucket is deleted and made
// again, or, with memory storage, when every replica restarts. A renewal
// keeps the fence: the hold's value records it once its first renewal
// rewrites it.
//
// # Repeats and lost replies
//
// A grant repeated by the holding token (a retry whose first reply was
// lost) reads the key, finds its own token, renews the hold for the new
// lease and is granted again with the same fence. A release repeated after
// a lost reply finds the purge marker its first attempt wrote, which names
// its token, and succeeds. A renewal or release by a token that does not
// hold the key changes nothing: its write is conditional on the revision of
// its own hold, and a read first confirms the token.
//
// # What stays in the bucket
//
// A held key is one message: the holder's token, the fence once renewed,
// the lease and the metadata, as JSON. A release or force release writes a
// purge marker that replaces it and expires after a minute; a hold whose
// time to live ran out is replaced by the server's marker, which expires
// after the bucket's LimitMarkerTTL. Then the key has no message left:
// locking many distinct names grows nothing that outlives the locks.
//
// # Keys
//
// A lock's key is escaped into one KV key: A-Z, a-z, 0-9, '-', '_' and '/'
// stand for themselves, every other byte is '=' and two upper-case hex
// digits (a '.' would split the subject). So a key of 512 bytes may take up
// to 1536 characters of the subject.
//
// # Waiting
//
// Every write of a key is also published on its subject, where a waiter's
// subscription (driver.Notifier) hears a release at once. The marker the
// server leaves when a hold expires is not published: the client's
// jittered poll, at most 100ms apart, finds an expired hold.
//
// # Bucket
//
// CreateBucket makes the bucket: history 1, per-key time to live on
// (LimitMarkerTTL, nats-server 2.11 or later), file storage, and the
// replicas asked for (use 3 on a cluster). Open checks it with
// CheckBucket and fails with driver.ErrNoSchema if it is missing or made
// without per-key time to live. distlock migrate makes it too.
//
// # Open, URL and timeouts
//
//	nats://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]?bucket=B&connect_timeout=5s&request_timeout=5s
//
// bucket defaults to DefaultBucket ("distlock"); a user without a password
// is a token. Open's connection reconnects for as long as it is open and
// buffers nothing meanwhile: a call while it reconnects fails at once.
// request_timeout (WithRequestTimeout, default 5s) bounds each call, also
// when the caller's context has no deadline. New takes a connection you
// made in any other way (TLS, credentials files, NKeys); it must reach
// JetStream's default API prefix (no domain).
//
// Reads (a refused grant, a renewal or release whose hint of the revision
// is stale, Inspect) ask the stream's leader, not a direct get that any
// replica may answer from behind. List reads the last message of every key
// of the bucket.
//
// Semaphores and read-write locks are not kept (their capabilities are not
// implemented; the client returns errors.ErrUnsupported).
//
// After Close every call returns an error matching driver.ErrClosed; calls
// in progress finish.
package natslock
