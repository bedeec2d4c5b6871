// Package etcdlock is a distlock backend on etcd: each acquisition is a key
// on its own lease, waiters queue fairly in create-revision order and each
// watches only the entry just before it, and the fence is the create
// revision of the holder's key, which increases across the whole cluster and
// survives restarts and leader changes.
//
// A lock's lease has the lock's TTL (lease plus lock-delay), so expiry and
// lock-delay behave as on every other backend; the client's watchdog renews
// it. A lease's TTL is fixed when it is granted, so a renewal with another TTL
// (Lock.Extend) moves the key onto a lease of that TTL in one transaction; the
// key keeps its create revision, and so its fence and place in the queue.
// etcd leases count in whole seconds and have a floor (1.5 election
// timeouts, 2s with etcd's defaults): the store keeps a short lease for at
// least that long, never shorter than asked, while the holder's local
// validity stays the lease it asked for.
//
// A waiter whose queue entry vanishes while it waits (its lease expired
// during a pause or was revoked, or an operator deleted the key) queues again
// at the tail with a new lease and keeps waiting while its context allows; it
// checks that its own entry still exists before it takes the lock.
//
// Open, and distlock.Open through the scheme "etcd", take a URL:
//
//	etcd://HOST:PORT[,HOST:PORT...][/PREFIX][?param=value...]
//
// PREFIX is WithPrefix's, "distlock" by default. The parameters, applied
// before Open's options (any other is an error):
//
//	dial_timeout=5s      WithDialTimeout: the first contact (default DefaultDialTimeout)
//	request_timeout=5s   WithRequestTimeout: each call to the store (default DefaultRequestTimeout)
//	linked_queue=true    WithLinkedQueue: waits that never read a whole queue (default false)
//	key_layout=ordered   WithKeyLayout: how the namespace names keys (default: its record)
//
// Open fails when no member answers within the dial timeout, naming the
// connection's own error, such as a refused connection. ParseURL reads a
// URL without connecting; New takes a client you built, Dial a
// clientv3.Config.
//
// Each namespace records its key layout (KeyLayout) in one key beside it,
// PREFIX.layout, written by its first backend. The ordered layout keeps the
// keys' byte order in the store, so a List page reads about a page; in it,
// waiters also find their place as WithLinkedQueue's do, since no client
// of an earlier release can share it.
//
// What stays in etcd: the layout record, and nothing per lock: a released
// lock leaves no key behind (its entry is deleted, and the release that
// empties a queue deletes the queue's tail and released keys, which are on
// leases of its entries). Leases freed by a release
// are kept for reuse, at most 256 per backend, and expire by themselves after
// their TTL; Close revokes them. Locking many distinct names therefore grows
// nothing that outlives the locks, apart from etcd's own history of deleted
// keys, which its compaction removes.
//
// The backend also keeps semaphores (driver.Semaphores: permits as entries
// under the name's own prefix, the first limit by create revision holding)
// and read-write locks (driver.RWLocks: readers', writers' and waiting
// writers' entries in three directories, granted by one transaction that
// compares them), under internal names no lock key can have. A writer's
// hold is downgraded to a reader's (driver.RWDowngrader) by one transaction
// that rewrites its entry in place, so it keeps its lease and fence and no
// other writer gets in between. A semaphore keeps its limit key until
// deleted; a write intent's key expires within driver.WriteIntentTTL. See
// docs/etcd-zookeeper.md.
//
// A semaphore's hold may count several permits (driver.WeightedPermits):
// its entry's value says how many, and an entry holds if it and the
// entries older than it count at most the limit, decided in the one
// transaction that puts it. A request that waits keeps its place in line
// with an intent key on a lease of driver.WriteIntentTTL, renewed at each
// refused attempt; while any intent lives, an attempt is granted only as
// the oldest intent's, so a stream of single permits cannot starve a
// large request. A single permit then costs what it cost before: one
// transaction, which also compares the intents' directory empty and reads
// the values of the limit oldest entries rather than their keys. Clients
// of earlier releases count a hold of several permits as one and ignore
// intents: do not take weighted holds on a semaphore they use.
//
// Every call after Close, or after the etcd client passed to New was closed,
// returns an error matching driver.ErrClosed.
package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/distlock/distlock/driver"
)

// Backend is a distlock backend on an etcd cluster. Create it with New, Dial
// or distlock.Open("etcd://...").
type Backend struct {
	cli            *clientv3.Client
	ownClient      bool
	prefix         string // namespace, ending in '/'
	requestTimeout time.Duration
	linkedQueue    bool                      // waiters trust the queue's tail and released keys (WithLinkedQueue)
	wantLayout     *keyLayout                // WithKeyLayout's, or nil to follow the namespace's record
	layout         atomic.Pointer[keyLayout] // the namespace's, once ready has learnt it
	learning       sync.Mutex                // held while ready learns the layout
	leases         *leasePool
	batch          *batcher // Acquire's and Release's transactions
	// holdWatches carries the holds' loss watches, on streams of their own
	// that Close ends at once. Ended one by one, thousands of watches
	// cancelled together on one stream can leave the client sending a
	// cancellation that etcd, blocked sending the answers the client does
	// not read meanwhile, never takes (etcd-io/etcd#18879): Close of a
	// service's backend holding 15 000 locks never returned.
	holdWatches clientv3.Watcher

	closed  atomic.Bool
	closing context.Context // done once Close starts: ends the waits
	stop    context.CancelFunc
	waits   sync.WaitGroup // AcquireWait calls in progress

	mu   sync.Mutex
	held map[holdID]*holding // acquisitions this backend made
	bg   sync.WaitGroup      // loss watchers and the requests' watch
	// requests holds the requests to release that no grant of this
	// backend has claimed yet, by entry name (request.go); nil until the
	// first grant starts the requests' watch.
	requests map[string]string
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Waiter        = (*Backend)(nil)
	_ driver.Lister        = (*Backend)(nil)
	_ driver.PageLister    = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
	_ driver.Namer         = (*Backend)(nil)
)

// New returns a backend over cli, which the caller keeps: Close does not
// close it. New makes no request; a nil cli or an invalid option is an error
// matching driver.ErrInvalidOption.
func New(cli *clientv3.Client, opts ...Option) (*Backend, error) {
	if cli == nil {
		return nil, fmt.Errorf("etcdlock: nil client: %w", driver.ErrInvalidOption)
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newBackend(cli, c), nil
}

func newBackend(cli *clientv3.Client, c config) *Backend {
	b := &Backend{cli: cli, prefix: c.prefix, requestTimeout: c.requestTimeout, linkedQueue: c.linkedQueue, wantLayout: c.keyLayout, held: make(map[holdID]*holding)}
	b.closing, b.stop = context.WithCancel(context.Background())
	b.leases = newLeasePool(cli)
	b.holdWatches = clientv3.NewWatcher(cli)
	b.batch = newBatcher(cli, c.requestTimeout, b.closing)
	return b
}

// Dial connects to etcd with cfg and returns a backend that closes the
// connection on Close. A nil cfg.Logger is replaced by a silent one and a
// zero cfg.DialTimeout by DefaultDialTimeout (WithDialTimeout overrides
// it). Dial waits, within ctx and the
// dial timeout, until a member answers, and otherwise fails naming the
// connection's error (a refused connection, say).
func Dial(ctx context.Context, cfg clientv3.Config, opts ...Option) (*Backend, error) {
	c, err := newConfig(opts)
	switch {
	case err != nil:
		return nil, err
	case cfg.DialTimeout < 0:
		return nil, fmt.Errorf("etcdlock: dial timeout %v: %w: must not be negative", cfg.DialTimeout, driver.ErrInvalidOption)
	case c.dialTimeout != 0:
		cfg.DialTimeout = c.dialTimeout
	case cfg.DialTimeout == 0:
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: connect: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if err := probe(pctx, cli); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcdlock: connect: %w", err)
	}
	b := newBackend(cli, c)
	b.ownClient = true
	return b, nil
}

// probe asks a member for its status with a request that fails as soon as
// no member can be reached, with the connection's own error, rather than
// waiting for one as the client's requests do.
func probe(ctx context.Context, cli *clientv3.Client) error {
	_, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Status(ctx, &pb.StatusRequest{}, grpc.WaitForReady(false))
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (connection %s)", err, cli.ActiveConnection().GetState())
	}
	return err
}

// Name returns "etcd".
func (b *Backend) Name() string { return "etcd" }

// Close ends the waits in progress (each returns an error matching
// driver.ErrClosed once it has deleted its queue entry), stops watching the
// locks this backend holds (they stay in the store until released or
// expired), revokes its spare leases, and closes the etcd client if Dial or
// Open created it. Closing twice is harmless.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed.Swap(true) {
		b.mu.Unlock()
		return nil
	}
	held := b.held
	b.held = make(map[holdID]*holding)
	b.mu.Unlock()
	b.stop()
	b.batch.close()
	b.waits.Wait()
	for _, h := range held {
		h.stop(b)
	}
	_ = b.holdWatches.Close() // ends their streams, cancelled or not
	b.bg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), b.requestTimeout)
	defer cancel()
	b.leases.close(ctx)
	if b.ownClient {
		return b.cli.Close()
	}
	return nil
}

// request bounds one call to the store by the request timeout.
func (b *Backend) request(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.requestTimeout)
}

// linked reports whether waiters trust the queue's tail and released keys:
// with WithLinkedQueue, and in a namespace of the ordered layout, which no
// client of a release that does not keep those keys can use.
func (b *Backend) linked() bool { return b.linkedQueue || b.keys() == orderedLayout }

// checkOpen returns driver.ErrClosed once the backend or its etcd client is
// closed.
func (b *Backend) checkOpen() error {
	if b.closed.Load() || b.cli.Ctx().Err() != nil {
		return driver.ErrClosed
	}
	return nil
}

// fail wraps err from a call to the store, with the cause where the store's
// error hides it: driver.ErrClosed once the backend or its client was
// closed, and the connection's own error when a request timed out while no
// member could be reached. An error that matches a sentinel already says
// what happened and is returned as it is.
func (b *Backend) fail(err error) error {
	switch {
	case errors.Is(err, driver.ErrNotHeld), errors.Is(err, driver.ErrNotAcquired), errors.Is(err, driver.ErrClosed):
		return err
	case b.closed.Load() || b.cli.Ctx().Err() != nil:
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	case errors.Is(err, context.DeadlineExceeded) && b.cli.ActiveConnection().GetState() != connectivity.Ready:
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		defer cancel()
		if perr := probe(ctx, b.cli); perr != nil {
			err = fmt.Errorf("%w: etcd unreachable: %w", err, perr)
		}
	}
	return fmt.Errorf("etcdlock: %w", err)
}

// probeTimeout bounds the look at the connection after a timed-out request.
const probeTimeout = 500 * time.Millisecond
