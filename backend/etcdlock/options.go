package etcdlock

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// DefaultPrefix is the namespace of lock keys when none is given.
const DefaultPrefix = "distlock"

// DefaultRequestTimeout bounds each request to etcd when WithRequestTimeout
// is not given.
const DefaultRequestTimeout = 5 * time.Second

// DefaultDialTimeout bounds Dial's first contact with etcd when the
// clientv3.Config sets no DialTimeout.
const DefaultDialTimeout = 5 * time.Second

// Option configures a Backend. An invalid value makes New, Dial or Open
// return an error matching driver.ErrInvalidOption.
type Option func(*config) error

type config struct {
	prefix         string // namespace, ending in '/'
	requestTimeout time.Duration
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

// urlOptions reads the query parameters of an etcd:// URL: dial_timeout
// (the Config's DialTimeout) and request_timeout (WithRequestTimeout), both
// Go durations.
func urlOptions(q url.Values) (dial time.Duration, opts []Option, err error) {
	dial = DefaultDialTimeout
	for name, vs := range q {
		if name != "dial_timeout" && name != "request_timeout" {
			return 0, nil, fmt.Errorf("etcdlock: unknown URL parameter %s: %w", name, driver.ErrInvalidOption)
		}
		if len(vs) != 1 {
			return 0, nil, fmt.Errorf("etcdlock: URL parameter %s given %d times: %w", name, len(vs), driver.ErrInvalidOption)
		}
		d, err := time.ParseDuration(vs[0])
		if err != nil {
			return 0, nil, fmt.Errorf("etcdlock: URL parameter %s=%q: %w: %v", name, vs[0], driver.ErrInvalidOption, err)
		}
		if name == "request_timeout" {
			opts = append(opts, WithRequestTimeout(d))
			continue
		}
		if d <= 0 {
			return 0, nil, fmt.Errorf("etcdlock: URL parameter dial_timeout=%v: %w: must be positive", d, driver.ErrInvalidOption)
		}
		dial = d
	}
	return dial, opts, nil
}
