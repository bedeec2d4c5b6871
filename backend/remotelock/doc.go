// Package remotelock is a distlock backend that takes its locks from the
// distlock lock service (distlock serve), so that a Go program uses the
// service through the same API as a store:
//
//	import _ "github.com/distlock/distlock/backend/remotelock"
//
//	client, err := distlock.Open(ctx, "distlock://locks.internal:7420?token_file=/run/secrets/distlock")
//
// Open, and distlock.Open through two schemes, take a URL:
//
//	distlock://HOST:PORT[/BASE]?token_file=PATH&request_timeout=5s&max_wait=30s&protocol=grpc&h2c=false&watch_loss=true
//	distlocks://HOST:PORT[/BASE]?...&ca_file=PATH
//
// distlock:// speaks plain HTTP, as HTTP/2 with prior knowledge (h2c), so
// that all calls share one connection; h2c=false falls back to HTTP/1.1
// (Connect protocol only). distlocks:// speaks HTTPS, HTTP/2 by ALPN, trusting
// the system's roots or the PEM certificates of ca_file. BASE is a path
// prefix for a service mounted below the root by a proxy. The bearer token
// comes from the file token_file (surrounding white space dropped) or else
// from $DISTLOCK_TOKEN; a URL never carries it. request_timeout is
// WithRequestTimeout, max_wait WithMaxWait, protocol=grpc WithGRPC and
// watch_loss=true WithLossWatch. An unknown parameter is an error. ParseURL
// reads a URL without connecting or reading a file; Open checks that the
// service answers (a GET of BASE/healthz) before it returns. New takes an
// HTTP client and base URL of your own.
//
// # What the service promises
//
// The service is stateless in front of its store (an embedded etcd by
// default, or an etcd cluster, Redis, ZooKeeper or PostgreSQL): a lock is
// the store's, and its guarantees are the store's. In particular the fence
// comes from the store behind the service and strictly increases with every
// grant of a key under the faults that store's backend documents (etcd and
// ZooKeeper keep it across restarts; a single Redis without persistence does
// not). Keys live in the namespace of the caller's tenant, named by the
// token: they are at most 512 bytes less that namespace (439 bytes by
// default), and no key reaches another tenant's lock.
//
// # Renewal is the client's
//
// The service never renews a lock on its own: a lock taken through this
// backend ends at its lease unless renewed, and distlock's watchdog (the
// core's, in this process) renews it as it does for any store. If this
// process stops, its locks end at their leases. The backend learns that a
// lock was lost when a renewal is refused; with WithLossWatch it learns it
// as soon as the service reports the lock expired or force-released.
//
// # Mapping
//
// Each acquisition is sent with the core's token as its request id, so a
// retried Acquire is idempotent: the service returns the same lock while it
// is held. A call that no earlier call of the acquisition can have been
// granted to (its first, or one after a refusal) says so (first_try), and
// the service then waits without looking for an earlier grant, which
// behind a long queue would cost the store the queue's length. The service
// answers with a token of its own, which the backend
// keeps (per acquisition, in memory) for Renew and Release; a Renew or
// Release of a token this backend did not acquire returns an error matching
// driver.ErrNotHeld without a call. Waiting happens in the service
// (driver.Waiter): an Acquire carries the wait left before the caller's
// deadline, at most WithMaxWait per call. An acquisition whose reply never
// came (a cut link, a cancelled wait) is released by request id: the
// backend repeats the request without a wait and releases what it returns.
//
// Calls that do not wait (an acquisition without a wait, Renew, Release)
// are sent alone while fewer than four such requests of their kind are in
// flight (acquisitions are one kind, renewals and releases the other, so
// that a hold's renewal never waits behind attempts); past that,
// concurrent callers' calls go together in the service's Batch (up to 64
// in one request), sent as soon as a request returns, and each call gets
// its own answer. Under load this spares most of a request's cost to
// both sides (over Redis at 64 callers, 1.3 to 2.4 times the Lock+Release
// rate of one call per request, in four runs); a lone caller waits for
// nothing. While calls are being batched, a waiting Lock first tries once
// in a batch, and waits in a call of its own only if the key is held (a
// key a try found held in the last second is not tried). A
// service older than Batch answers it Unimplemented, and the backend sends
// every call alone from then on.
//
// The service's codes map back to the driver's errors: ABORTED matches
// driver.ErrNotAcquired, NOT_FOUND driver.ErrNotHeld, INVALID_ARGUMENT
// driver.ErrInvalidKey or driver.ErrInvalidOption, and every call after
// Close driver.ErrClosed. UNAUTHENTICATED, PERMISSION_DENIED,
// RESOURCE_EXHAUSTED (a tenant's rate limit) and UNAVAILABLE (the store, or a
// service shutting down) are returned wrapped, as the connect.Error they are
// (connect.CodeOf reads them). A wait, a renewal and a release do not stop
// at RESOURCE_EXHAUSTED: they ask again after a backoff, within the wait or
// the request timeout, so that the rate limit delays a release rather than
// leaving the lock held until its lease ends.
//
// ForceRelease needs an admin token. The service records the reason given
// to distlock.Client.ForceRelease in its audit log.
package remotelock
