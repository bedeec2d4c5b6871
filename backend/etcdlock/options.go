package etcdlock

import (
	"fmt"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// DefaultPrefix is the namespace of lock keys when none is given.
const DefaultPrefix = "distlock"

// DefaultRequestTimeout bounds each request to etcd when WithRequestTimeout
// is not given.
const DefaultRequestTimeout = 5 * time.Second

// DefaultDialTimeout bounds the first contact of Open and Dial with etcd
// when neither WithDialTimeout nor the clientv3.Config sets one.
const DefaultDialTimeout = 5 * time.Second

// Option configures a Backend. An invalid value makes New, Dial or Open
// return an error matching driver.ErrInvalidOption.
type Option func(*config) error

type config struct {
	prefix         string // namespace, ending in '/'
	requestTimeout time.Duration
	dialTimeout    time.Duration // 0: the clientv3.Config's, or DefaultDialTimeout
	linkedQueue    bool
	keyLayout      *keyLayout // nil: the namespace's record
}

func newConfig(opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix + "/", requestTimeout: DefaultRequestTimeout}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// WithPrefix sets the namespace under which lock keys live; leading and
// trailing slashes are dropped, and an empty namespace is refused. The
// default is DefaultPrefix.
func WithPrefix(prefix string) Option {
	return func(c *config) error {
		p := strings.Trim(prefix, "/")
		if p == "" {
			return fmt.Errorf("etcdlock: prefix %q: %w: empty", prefix, driver.ErrInvalidOption)
		}
		c.prefix = p + "/"
		return nil
	}
}

// WithRequestTimeout bounds each single request to etcd (a transaction, a
// read, a lease keepalive), within the caller's context: a store that does
// not answer fails the call after d rather than when the caller's context
// ends. A native wait is made of such requests plus a watch, which the wait's
// own context bounds. d must be positive. The default is
// DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("etcdlock: request timeout %v: %w: must be positive", d, driver.ErrInvalidOption)
		}
		c.requestTimeout = d
		return nil
	}
}

// WithDialTimeout bounds the first contact of Open and Dial with etcd (the
// client's DialTimeout): they fail if no member answers within it. d must
// be positive. It overrides the DialTimeout of Dial's clientv3.Config. The
// default is DefaultDialTimeout (5s); New ignores it.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("etcdlock: dial timeout %v: %w: must be positive", d, driver.ErrInvalidOption)
		}
		c.dialTimeout = d
		return nil
	}
}

// WithLinkedQueue makes a waiter find the entry ahead of it, and learn that
// it is first, from two keys of the queue instead of reading the whole
// queue, so that queueing and each handoff cost the store the same whatever
// the number of waiters (etcd serves a range sorted by create revision by
// reading all of it). Every backend keeps the keys, with or without this
// option; one of an earlier release does not. Turn it on only once no client
// of an earlier release uses the prefix: a waiter that trusts the keys would
// not see such a client's entry ahead of it, and could be granted beside it.
// URL parameter linked_queue=true. See docs/etcd-zookeeper.md.
func WithLinkedQueue() Option {
	return func(c *config) error {
		c.linkedQueue = true
		return nil
	}
}

// WithKeyLayout asserts the namespace's key layout (see KeyLayout): a
// namespace that records none gets k, and the first call of a backend on
// one that records another fails with ErrKeyLayoutMismatch, as does
// KeyLayoutOrdered on a namespace that holds keys of an earlier release.
// Without it a backend follows the namespace's record, and records
// KeyLayoutEscaped where there is none. Open also reads it from the URL
// parameter key_layout ("escaped" or "ordered").
func WithKeyLayout(k KeyLayout) Option {
	return func(c *config) error {
		l, err := k.layout()
		if err != nil {
			return fmt.Errorf("etcdlock: WithKeyLayout: %w", err)
		}
		c.keyLayout = l
		return nil
	}
}
