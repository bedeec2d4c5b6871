// Package etcdlock is a distlock backend on etcd: each acquisition is a key
// on its own lease, waiters queue fairly in create-revision order and each
// watches only the entry just before it (and, as a hint that saves a read at
// handoff, the one before that), and the fence is the create revision of the
// holder's key, which increases across the whole cluster and survives
// restarts and leader changes.
//
// A lock's lease has the lock's TTL (lease plus lock-delay), so expiry and
// lock-delay behave as on every other backend; the client's watchdog renews
// it. etcd leases count in whole seconds and have a floor (1.5 election
// timeouts, 2s with etcd's defaults): the store keeps a short lease for at
// least that long, never shorter than asked, while the holder's local
// validity stays the lease it asked for.
//
// Open registers the scheme "etcd": etcd://HOST:PORT[,HOST:PORT...]/PREFIX,
// with PREFIX "distlock" by default.
package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	distlock.Register("etcd", open)
}

// DefaultPrefix is the namespace of lock keys when none is given.
const DefaultPrefix = "distlock"

// Backend is a distlock backend on an etcd cluster. Create it with New or
// distlock.Open("etcd://...").
type Backend struct {
	cli       *clientv3.Client
	ownClient bool
	prefix    string // namespace, ending in '/'
	leases    *leasePool

	mu     sync.Mutex
	held   map[string]*holding // by token: acquisitions this backend made
	closed bool
	bg     sync.WaitGroup // loss watchers
}

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Waiter  = (*Backend)(nil)
	_ driver.Lister  = (*Backend)(nil)
	_ driver.Namer   = (*Backend)(nil)
)

// Option configures a Backend.
type Option func(*Backend)

// WithPrefix sets the namespace under which lock keys live. The default is
// DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(b *Backend) { b.prefix = strings.Trim(prefix, "/") + "/" }
}

// New returns a backend over cli. Close does not close cli.
func New(cli *clientv3.Client, opts ...Option) *Backend {
	b := &Backend{cli: cli, prefix: DefaultPrefix + "/", held: make(map[string]*holding)}
	for _, o := range opts {
		o(b)
	}
	b.leases = newLeasePool(cli)
	return b
}

// Dial connects to etcd with cfg and returns a backend that closes the
// connection on Close. A nil cfg.Logger is replaced by a silent one.
func Dial(cfg clientv3.Config, opts ...Option) (*Backend, error) {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcdlock: connect %v: %w", cfg.Endpoints, err)
	}
	b := New(cli, opts...)
	b.ownClient = true
	return b, nil
}

// open builds a backend for etcd://HOST:PORT[,HOST:PORT...]/PREFIX.
func open(_ context.Context, u *url.URL) (driver.Backend, error) {
	if u.Host == "" {
		return nil, errors.New("etcdlock: the URL names no endpoint")
	}
	var eps []string
	for _, h := range strings.Split(u.Host, ",") {
		eps = append(eps, "http://"+h)
	}
	var opts []Option
	if p := strings.Trim(u.Path, "/"); p != "" {
		opts = append(opts, WithPrefix(p))
	}
	return Dial(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second}, opts...)
}

// Name returns "etcd".
func (b *Backend) Name() string { return "etcd" }

// Close stops watching the locks this backend holds (they stay in the store
// until released or expired), revokes its spare leases, and closes the etcd
// client if Open created it.
func (b *Backend) Close() error {
	b.mu.Lock()
	b.closed = true
	held := b.held
	b.held = make(map[string]*holding)
	b.mu.Unlock()
	for _, h := range held {
		h.stop(b)
	}
	b.bg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b.leases.close(ctx)
	if b.ownClient {
		return b.cli.Close()
	}
	return nil
}
