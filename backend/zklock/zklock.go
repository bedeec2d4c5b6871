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
// the moment it saw the holder's last renewal, and deletes the holder's node,
// by version, once the lease and lock-delay are over without a renewal. A
// key nobody waits for is therefore not freed by expiry until someone waits.
//
// Open registers the scheme "zk": zk://HOST:PORT[,HOST:PORT...]/ROOT, with
// ROOT "/distlock" by default and ?session_timeout=10s.
package zklock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	distlock.Register("zk", open)
}

const (
	// DefaultRoot is the node under which lock parents live.
	DefaultRoot = "/distlock"
	// DefaultSessionTimeout is the session timeout asked of the server.
	DefaultSessionTimeout = 10 * time.Second
)

// Backend is a distlock backend on a ZooKeeper ensemble, over one session.
// Create it with Dial or distlock.Open("zk://...").
type Backend struct {
	conn           *zk.Conn
	root           string
	sessionTimeout time.Duration
	janitor        *janitor

	mu     sync.Mutex
	holds  map[string]*hold // by token
	closed bool
	bg     sync.WaitGroup // session watcher, hold watchers, cleanups
}

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Waiter  = (*Backend)(nil)
	_ driver.Lister  = (*Backend)(nil)
	_ driver.Namer   = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithRoot sets the node under which lock parents live. The default is
// DefaultRoot.
func WithRoot(root string) Option {
	return func(b *Backend) { b.root = "/" + strings.Trim(root, "/") }
}

// WithSessionTimeout sets the session timeout asked of the server. The
// default is DefaultSessionTimeout.
func WithSessionTimeout(d time.Duration) Option {
	return func(b *Backend) { b.sessionTimeout = d }
}

// quiet drops go-zookeeper's log lines; errors reach callers as values.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// Dial connects to the ZooKeeper servers ("host:port") and returns a
// backend over a new session, which Close ends.
func Dial(ctx context.Context, servers []string, opts ...Option) (*Backend, error) {
	b := &Backend{root: DefaultRoot, sessionTimeout: DefaultSessionTimeout, holds: make(map[string]*hold)}
	for _, o := range opts {
		o(b)
	}
	conn, events, err := zk.Connect(servers, b.sessionTimeout, zk.WithLogger(quiet{}))
	if err != nil {
		return nil, fmt.Errorf("zklock: connect %v: %w", servers, err)
	}
	b.conn = conn
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
	if err := b.ensureRoot(ctx); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("zklock: create root %s: %w", b.root, err)
	}
	return b, nil
}

// ensureRoot creates the root, retrying while the server is not serving yet
// (a server that just started accepts connections before it serves them).
func (b *Backend) ensureRoot(ctx context.Context) error {
	for {
		err := b.ensure(ctx, b.root)
		if !errors.Is(err, zk.ErrNoServer) && !errors.Is(err, zk.ErrConnectionClosed) {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// open builds a backend for zk://HOST:PORT[,HOST:PORT...]/ROOT.
func open(ctx context.Context, u *url.URL) (driver.Backend, error) {
	if u.Host == "" {
		return nil, errors.New("zklock: the URL names no server")
	}
	var opts []Option
	if r := strings.Trim(u.Path, "/"); r != "" {
		opts = append(opts, WithRoot(r))
	}
	if s := u.Query().Get("session_timeout"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("zklock: session_timeout: %w", err)
		}
		opts = append(opts, WithSessionTimeout(d))
	}
	return Dial(ctx, strings.Split(u.Host, ","), opts...)
}

// Name returns "zk".
func (b *Backend) Name() string { return "zk" }

// Close removes empty parents it knows of and ends the session, which
// deletes every node of this backend, held locks included.
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
	for _, h := range holds {
		h.end()
	}
	b.janitor.stop()
	b.conn.Close()
	b.bg.Wait()
	return nil
}
