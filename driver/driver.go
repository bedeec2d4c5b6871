// Package driver is what a distlock backend implements, as database/sql/driver
// is for database/sql. Applications use package distlock; a backend author
// implements Backend, adds the optional capabilities its store allows,
// returns errors that match the sentinels below, and runs the locktest
// conformance suite. The capabilities, each found by a type assertion:
//
//   - TTLRenewer: a renewal that says how long the store kept the hold;
//   - Waiter: waiting for a key in the store's own queue;
//   - Handoff: passing a held key straight to a waiting token;
//   - MultiAcquirer: several keys in one request, all or none;
//   - Notifier: a notice when a key is released, for the client's wait loop;
//   - Lister and PageLister: the held locks under a prefix, all or a page;
//   - PrefixWatcher: the keys under a prefix that changed, as the store
//     tells of them;
//   - ForceReleaser: freeing a key whoever holds it, with the operator's
//     ForceOptions;
//   - ReleaseRequester: asking a key's holder to release it, told through
//     its Grant's Requested context;
//   - Namer: a short name for metrics and logs;
//   - Semaphores: leased permits (distlock.Semaphore), and PermitWaiter:
//     waiting for a permit where the permits are kept;
//   - RWLocks: read-write locks (distlock.RWMutex), and RWWaiter: waiting
//     for a hold where the locks are kept.
//
// The sentinel errors are the same values as distlock's, so errors.Is matches
// them on either side.
package driver

import (
	"context"
	"time"
)

// Backend is the interface a store implements. Each method makes a single
// attempt against the store; distlock's Client owns tokens, validation,
// waiting, the watchdog, reentrancy and the local validity deadline.
//
// Methods must be safe for concurrent use, honour ctx, and wrap store errors.
// An error says only what the backend knows: the client names the operation
// and the key (distlock.KeyError), so an error names neither. One that
// matches a sentinel starts with it, so that its "distlock: " is said once,
// and adds what only the store can tell, as in
// fmt.Errorf("%w: node 2 holds it", ErrNotAcquired); a store failure wraps
// the store's error, as in fmt.Errorf("redislock: %w", err).
// A backend that waits natively implements Waiter; one that can announce
// releases implements Notifier; one that can enumerate locks implements Lister.
type Backend interface {
	// Acquire makes one attempt to take req.Key for req.Token with a store-side
	// time to live of req.TTL. If another token holds the key it returns an
	// error matching ErrNotAcquired. The returned fence must be greater than
	// every fence granted before for the same key.
	//
	// An attempt by the token that already holds the key (a retry whose
	// first reply was lost) is either refused with ErrNotAcquired or granted
	// again with the same fence, and then renews the hold: the store keeps
	// the key for req.TTL from this request, as Renew would, so that the
	// lease the caller counts from the repeat is one the store gave.
	Acquire(ctx context.Context, req AcquireRequest) (Grant, error)
	// Renew resets the time to live of key to ttl if token holds it, and
	// returns an error matching ErrNotHeld otherwise. It must be idempotent.
	// ttl may differ from the one the key was granted with (Lock.Extend): the
	// store must then keep the key for the new ttl, longer or shorter.
	Renew(ctx context.Context, key, token string, ttl time.Duration) error
	// Release deletes key if token holds it, and returns an error matching
	// ErrNotHeld otherwise, changing nothing. It must be idempotent.
	Release(ctx context.Context, key, token string) error
	// Inspect reports the state of key. A key that is not held is not an
	// error: Info.Held is false.
	Inspect(ctx context.Context, key string) (Info, error)
	// Close releases the backend's resources. It does not close clients the
	// caller passed in.
	Close() error
}

// AcquireRequest is one acquisition attempt as a backend sees it.
type AcquireRequest struct {
	// Key is a valid key (see ValidateKey); backends map it to their namespace.
	Key string
	// Token is the 128-bit random identity of this acquisition, hex-encoded.
	Token string
	// TTL is how long the store keeps the lock without renewal: the lease plus
	// any lock-delay.
	TTL time.Duration
	// Meta is stored with the lock and returned by Inspect.
	Meta Meta
	// Intent is set only on an exclusive RWLocks.AcquireRW attempt by a
	// writer that waits, and on a WeightedPermits.AcquirePermits attempt
	// by a request for several permits that waits: the identity of its
	// intent, which a refused attempt records to keep later requests out.
	// It is empty on every other attempt, and Acquire ignores it.
	Intent string
	// Permits is how many permits a semaphore's attempt takes as one hold
	// (WeightedPermits); 0 means 1. Locks ignore it.
	Permits int
	// Unfollowed says that nobody follows the grant's Lost: the lock is
	// held elsewhere by token (Client.AcquireToken, a lock service's
	// client). A backend that pays to watch a hold (redislock's tracked
	// reads) need not watch this one.
	Unfollowed bool
}

// Meta is what a lock records about its holder, for Inspect and for logs.
type Meta struct {
	Owner      string            `json:"owner,omitempty"`
	BusinessID string            `json:"business_id,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
}

// Grant is a successful acquisition.
type Grant struct {
	// Fence strictly increases with every grant of the same key.
	Fence uint64
	// Lost, if not nil, is done once the backend learns that the hold ended
	// (a session expired, a pinned connection died). Its context.Cause, if a
	// *Loss, says how; the client reports any other as a loss the store
	// told of (observe.LossStoreDeleted). The client follows it
	// with context.AfterFunc, which costs no goroutine per held lock.
	// Backends without such a signal leave it nil; the client's renewals
	// detect loss instead.
	Lost context.Context
	// Sent, if not zero, is when the request that confirmed the hold was
	// sent; the local validity deadline counts from it. Waiters set it to the
	// last lease confirmation before the grant. Zero means the client uses the
	// time it sent the acquire request.
	Sent time.Time
	// Requested, if not nil, is done once somebody asked the holder to
	// release the key (ReleaseRequester); context.Cause is a
	// *ReleaseRequest. The hold goes on: the holder decides. Backends that
	// cannot tell leave it nil.
	Requested context.Context
	// TTL, if not zero, is the time to live the store gave when it gave less
	// than req.TTL (a lock service that caps how long a key may be held):
	// the client's validity then counts with it.
	TTL time.Duration
}

// TTLRenewer is implemented by backends whose store may renew for less
// than asked (a lock service's hold cap). RenewTTL is Renew that returns the
// time to live the store gave, which the client's validity then counts
// with; a backend that gives what it is asked does not need it.
type TTLRenewer interface {
	RenewTTL(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error)
}

// Info describes a key's state in the store.
type Info struct {
	Key  string
	Held bool
	// Fence is the fence of the current holder, or of the last grant if the
	// key is free and the store still knows it (0 otherwise).
	Fence uint64
	// TTL is the store-side time left before the hold expires without
	// renewal; 0 when not held or when the store has no such notion.
	TTL  time.Duration
	Meta Meta
	// Permits is how many permits a semaphore's hold counts
	// (WeightedPermits); 0 means 1. It is 0 for a lock.
	Permits int
}

// Waiter is implemented by backends that queue waiters natively (etcd,
// ZooKeeper). AcquireWait blocks until req.Key is granted or ctx ends; ctx
// carries the caller's wait deadline. On failure it leaves no queue entry
// behind and returns an error matching ErrNotAcquired, joined with ctx.Err().
type Waiter interface {
	AcquireWait(ctx context.Context, req AcquireRequest) (Grant, error)
}

// Handoff is implemented by backends that can pass a held key from one token
// straight to another in one request, so that the key is never free in
// between (Redis). A client releasing a key that one of its own waiters is
// next in line for hands it over this way: one round trip instead of a
// release, a wake-up and an acquire.
type Handoff interface {
	// Handoff gives key to next.Token, with a new fence and next's TTL and
	// metadata, if token holds key, and returns next's grant. If token does
	// not hold key it returns an error matching ErrNotHeld and changes
	// nothing.
	Handoff(ctx context.Context, key, token string, next AcquireRequest) (Grant, error)
}

// Notifier is implemented by backends that can announce that a key may have
// become free (Redis pub/sub, PostgreSQL LISTEN). The client's wait loop
// retries as soon as the channel fires and falls back to a capped, jittered
// backoff poll for notices that get lost. stop must be called once.
type Notifier interface {
	Watch(ctx context.Context, key string) (wake <-chan struct{}, stop func(), err error)
}

// Lister is implemented by backends that can enumerate held locks.
type Lister interface {
	// List returns the held locks whose keys start with prefix.
	List(ctx context.Context, prefix string) ([]Info, error)
}

// PageLister is implemented by backends that can list one page of held locks
// without reading the details of every lock under the prefix.
type PageLister interface {
	// ListPage returns, in key order (bytewise), at most limit held locks whose
	// keys start with prefix and sort after `after` ("" for the first page).
	// It returns fewer than limit only when no more held locks follow, as
	// far as the store's reads saw. limit is at least 1.
	ListPage(ctx context.Context, prefix, after string, limit int) ([]Info, error)
}

// ForceReleaser is implemented by backends that can free a key whoever
// holds it, for operators (the CLI's and the service's force release). The
// holder is not told at once: it learns of the loss at its next renewal, or
// when its validity deadline passes.
type ForceReleaser interface {
	// ForceRelease deletes key whatever token holds it and returns what the
	// store knew of the hold it ended. If the key was not held it returns an
	// error matching ErrNotHeld and changes nothing. A backend that keeps an
	// audit trail (a lock service) records opts.Reason; others ignore it.
	ForceRelease(ctx context.Context, key string, opts ForceOptions) (Info, error)
}

// ForceOptions are the operator's arguments to ForceRelease, as
// database/sql/driver.TxOptions are to BeginTx.
type ForceOptions struct {
	// Reason says why the key is freed, for the audit trail.
	// distlock.Client.ForceRelease requires it; a direct call may leave it
	// empty.
	Reason string
}

// ReleaseRequester is implemented by backends that can ask a key's holder to
// release it: a polite request, which the holder may honour once its unit of
// work is done, where ForceReleaser takes the key at once.
type ReleaseRequester interface {
	// RequestRelease ends the Requested context of the grant that holds key,
	// with a *ReleaseRequest carrying reason as its cause, and returns the
	// key's Info. It changes nothing in the store's hold. If key is free it
	// returns an error matching ErrNotHeld and tells nobody. A request is a
	// notice, not a record: a holder that is not following its store's
	// notices at that moment does not learn of it.
	RequestRelease(ctx context.Context, key, reason string) (Info, error)
}

// Loss is the cause of a Grant's Lost context when the backend saw what
// became of the key: LossDeleted (it is free) or LossTaken (another token
// holds it).
type Loss struct {
	Reason string
}

// Reasons of a Loss, as package observe names them.
const (
	LossDeleted = "deleted"
	LossTaken   = "taken"
)

func (l *Loss) Error() string { return "lock lost: " + l.Reason }

// ReleaseRequest is the cause of a Grant's Requested context.
type ReleaseRequest struct {
	Reason string // why the holder is asked to release, as the requester said
}

func (r *ReleaseRequest) Error() string { return "release requested: " + r.Reason }

// Namer is implemented by backends that report a short name for metrics and
// logs, such as "redis" or "etcd".
type Namer interface {
	Name() string
}
