// Package zklock is a distlock backend on ZooKeeper: each acquisition is an
// ephemeral sequential node under a per-key parent, waiters queue fairly by
// sequence number and each watches only the node just before its own (no
// herd), and the fence is the holder node's czxid, a transaction id that
// increases across the whole ensemble and survives restarts and elections.
//
// Nodes belong to the backend's ZooKeeper session: when the session expires
// every lock on it is lost (Grant.Lost is done). While the connection is
// down the session may still live, but the server expires it a session
// timeout after it last heard from the client, which can be as early as a
// third of the timeout after the client notices the silence (the client
// gives up on a silent connection after two thirds of it). So a backend that
// stays disconnected for a sixth of the session timeout reports its locks
// lost, before any other client can be granted them, and deletes their nodes
// if the session comes back. The session timeout you ask for must lie within
// the server's bounds (2 to 20 ticks by default): a server that shortens it
// makes that margin thinner.
//
// ZooKeeper has no per-node expiry, so a lock's lease is kept in the node:
// the waiter just behind the holder measures the lease on its own clock from
// the moment it saw the holder's last write, and deletes the holder's node,
// by version, once the lease and lock-delay are over without a renewal. A
// holder granted after a wait writes its node once, when the hold has lasted
// 100 ms or a quarter of its lease, whichever is shorter, which restarts that
// measure and tells a waiter that had queued behind it while it waited that
// it is now next. Such a waiter otherwise looks at the queue once per its
// predecessor's lease, so a holder that hangs within that first moment is
// freed after at most about twice its lease. A key nobody waits for is not
// freed by expiry until someone waits.
//
// A waiter whose own node vanishes while it waits (an operator deleted it,
// or the server expired its session and go-zookeeper opened a new one)
// never takes the lock without it: it creates its node again, at the tail
// of the queue, and waits on while its context allows; a dropped connection
// is waited through too. A wait that ends deletes its node and returns an
// error matching driver.ErrNotAcquired; Close ends it with driver.ErrClosed.
//
// # Connecting
//
// New builds a backend over a connection you made with zk.Connect, and the
// event channel Connect returned, which the backend then reads to learn of
// disconnections and session expiry. Dial connects for you. Open, and
// distlock.Open through the scheme "zk", take a URL:
//
//	zk://HOST:PORT[,HOST:PORT...][/ROOT][?param=value...]
//
// with ROOT WithRoot's, "/distlock" by default. The parameters, applied
// before Open's options (any other is an error):
//
//	session_timeout=10s   WithSessionTimeout (default DefaultSessionTimeout)
//	dial_timeout=5s       WithDialTimeout (default DefaultDialTimeout)
//	request_timeout=5s    WithRequestTimeout (default DefaultRequestTimeout)
//
// ParseURL reads a URL without connecting. go-zookeeper connects in the
// background and retries for ever; Dial and Open wait for a session for at
// most the dial timeout and then fail naming the last connection error,
// such as a refused dial. Every request is bounded by the request timeout,
// whatever the caller's context allows.
//
// # What stays in ZooKeeper
//
// A released lock leaves nothing: its node is deleted, and the key's parent
// is deleted half a second after its queue is empty (a parent that has
// children again stays). Parents are container nodes, so the server also
// removes empty ones (about once a minute by default) if the backend's
// process ended before it could. What remains is the root and the nodes on
// its path, created once; locking many distinct keys grows nothing.
//
// # Semaphores and read-write locks
//
// The backend also keeps semaphores (driver.Semaphores: permit nodes under
// ROOT/sem.<name>, the first limit by sequence holding) and read-write locks
// (driver.RWLocks: reader, writer and write-intent nodes in one queue under
// ROOT/rw.<name>). A writer's hold is downgraded to a reader's
// (driver.RWDowngrader) by a rewrite of its node's value, by version: the
// node keeps its czxid (the fence), its lease and its place in the queue,
// so no writer gets in between, and a writer's intent queued before the
// downgrade still keeps later readers out. A semaphore's node and its limit
// node stay, one small pair per name. See docs/zookeeper-sync.md.
//
// A semaphore's hold may count several permits (driver.WeightedPermits):
// its node's name and value say how many, and a node holds if no waiting
// request's intent is ahead of it and it and the holds ahead of it count
// at most the limit. A request that waits keeps its place with an intent
// node in the same queue, rewritten at each refused attempt and deleted,
// as a lease is, by those it keeps out once not rewritten for
// driver.WriteIntentTTL; it takes its permits by creating its hold at the
// tail and deleting its intent in one transaction checked against the
// listing it decided on. So a stream of single permits cannot starve a
// large request. A single permit still costs one request on a semaphore
// that never took a weighted hold, while fewer than the limit are held;
// on one that did (a child of its limit node marks it, for good), one
// request alone in the queue and a listing more otherwise. Clients of
// earlier releases count a hold of several permits as one permit, and an
// intent as one: do not take weighted holds on a semaphore they use.
package zklock

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// Backend is a distlock backend on a ZooKeeper ensemble, over one session.
// Create it with New, Dial or distlock.Open("zk://...").
type Backend struct {
	config
	conn    *zk.Conn
	owned   bool     // made by Dial: Close closes it
	log     *connLog // Dial's record of connection problems; nil for New
	janitor *janitor

	life     context.Context         // cancelled with cause ErrClosed by Close
	end      context.CancelCauseFunc // cancels life
	connGone chan struct{}           // closed once the connection's events end

	mu     sync.Mutex
	holds  map[string]*hold // by token
	closed bool
	bg     sync.WaitGroup // session watcher, janitor, hold watchers, cleanups

	syncMemory *syncState // semaphores' and read-write locks' memory (semaphore_lease.go)
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Waiter        = (*Backend)(nil)
	_ driver.Lister        = (*Backend)(nil)
	_ driver.PageLister    = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
	_ driver.Namer         = (*Backend)(nil)
)

// New returns a backend over conn, a connection you made with zk.Connect,
// and events, the channel Connect returned with it. The backend reads events
// from then on until it is closed or the channel closes: it learns of
// disconnections and session expiry there, which end its locks (use
// zk.WithEventCallback if you need the events too). WithSessionTimeout
// should match the timeout conn was made with; WithDialTimeout does not
// apply. New makes no request: the root is created on first use. Close does
// not close conn; it deletes the nodes of the locks still held, which
// conn's session would otherwise keep. Once conn is closed, calls fail with
// an error matching driver.ErrClosed.
func New(conn *zk.Conn, events <-chan zk.Event, opts ...Option) (*Backend, error) {
	if conn == nil || events == nil {
		return nil, fmt.Errorf("zklock: New needs the connection and the event channel zk.Connect returned: %w", driver.ErrInvalidOption)
	}
	cfg, err := apply(opts)
	if err != nil {
		return nil, err
	}
	return newBackend(conn, events, cfg, nil), nil
}

// newBackend starts the backend's session watcher and janitor. A non-nil
// log marks a connection of the backend's own.
func newBackend(conn *zk.Conn, events <-chan zk.Event, cfg config, log *connLog) *Backend {
	b := &Backend{config: cfg, conn: conn, owned: log != nil, log: log, connGone: make(chan struct{}), holds: make(map[string]*hold),
		syncMemory: &syncState{seen: make(map[string]map[string]sighting), limits: make(map[string]storedLimit)}}
	b.life, b.end = context.WithCancelCause(context.Background())
	b.janitor = newJanitor(b)
	b.bg.Add(2)
	go func() {
		defer b.bg.Done()
		b.watchSession(events)
	}()
	go func() {
		defer b.bg.Done()
		b.janitor.run()
	}()
	return b
}

// Dial connects to the ZooKeeper servers ("host:port") and returns a
// backend over a new session, which Close ends. It waits for the session
// for at most the dial timeout (see WithDialTimeout) or until ctx
// ends, then fails naming the last connection error.
func Dial(ctx context.Context, servers []string, opts ...Option) (*Backend, error) {
	cfg, err := apply(opts)
	if err != nil {
		return nil, err
	}
	if len(servers) == 0 {
		return nil, fmt.Errorf("zklock: Dial: no server: %w", driver.ErrInvalidOption)
	}
	log := &connLog{}
	conn, events, err := zk.Connect(servers, cfg.sessionTimeout, zk.WithLogger(log), zk.WithLogInfo(false), zk.WithDialer(log.dial))
	if err != nil {
		return nil, fmt.Errorf("zklock: connect: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.dialTimeout)
	defer cancel()
	if err := awaitSession(ctx, conn, events); err != nil {
		last := log.lastError()
		log.abort(conn, events)
		return nil, connectError(cfg.dialTimeout, err, last)
	}
	b := newBackend(conn, events, cfg, log)
	if err := b.ensureRoot(ctx); err != nil {
		_ = b.Close()
		return nil, connectError(cfg.dialTimeout, fmt.Errorf("create root %s: %w", b.root, err), log.lastError())
	}
	return b, nil
}

// connectError says that Dial got no usable session, and why. It names
// neither the servers nor the URL: the caller knows them.
func connectError(timeout time.Duration, err, last error) error {
	if last == nil {
		return fmt.Errorf("zklock: connect (dial timeout %v): %w", timeout, err)
	}
	return fmt.Errorf("zklock: connect (dial timeout %v): %w; last connection error: %w", timeout, err, last)
}

// ensureRoot creates the root, retrying while the server is not serving yet
// (a server that just started accepts connections before it serves them).
func (b *Backend) ensureRoot(ctx context.Context) error {
	for {
		err := b.ensure(ctx, b.root)
		if !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrConnectionClosed) {
			return err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// Name returns "zk".
func (b *Backend) Name() string { return "zk" }

// Close ends every operation and wait of the backend with an error matching
// driver.ErrClosed, removes empty parents it knows of, and ends the session if Dial made it, which deletes
// every node of this backend; over a connection given to New, it deletes
// the nodes of the locks still held instead. Calls after Close fail with
// driver.ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	holds := b.holds
	b.holds = make(map[string]*hold)
	b.mu.Unlock()
	b.end(driver.ErrClosed)
	for _, h := range holds {
		h.end()
	}
	if !b.owned {
		b.deleteHolds(holds)
	}
	b.janitor.stop()
	if b.owned {
		b.conn.Close()
	}
	b.bg.Wait()
	return nil
}

// deleteHolds deletes the nodes of holds, for Close over a session that
// outlives the backend.
func (b *Backend) deleteHolds(holds map[string]*hold) {
	ctx, cancel := context.WithTimeout(context.Background(), b.requestTimeout)
	defer cancel()
	for _, h := range holds {
		if err := b.deleteNode(ctx, h.path, -1); err == nil {
			b.janitor.mark(path.Dir(h.path))
		}
	}
}
