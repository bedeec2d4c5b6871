package remotelock

import (
	"fmt"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
)

// DefaultRequestTimeout bounds each call to the service when
// WithRequestTimeout is not given. A waiting Acquire gets its wait on top.
const DefaultRequestTimeout = 5 * time.Second

// DefaultMaxWait caps the wait of one waiting Acquire call when WithMaxWait
// is not given; a longer wait is made of several calls, which keep a lock's
// place in the key's queue from one to the next. It is well under the
// service's default limit on a wait (5 min), since proxies and load
// balancers cut calls that stay idle for a minute.
const DefaultMaxWait = 30 * time.Second

// Option configures a Backend. An invalid value makes New or Open return an
// error matching driver.ErrInvalidOption.
type Option func(*config) error

type config struct {
	token          string // bearer token; empty sends none
	requestTimeout time.Duration
	maxWait        time.Duration
	grpc           bool
	watchLoss      bool
}

func newConfig(opts []Option) (config, error) {
	c := config{requestTimeout: DefaultRequestTimeout, maxWait: DefaultMaxWait}
	for _, o := range opts {
		if o == nil {
			return config{}, fmt.Errorf("remotelock: nil option: %w", driver.ErrInvalidOption)
		}
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// WithToken sets the bearer token sent with every call, which names the
// caller's tenant and role to the service. It must not be empty or contain
// white space or control characters. The default is no token, which only a
// service run without authentication accepts.
func WithToken(bearer string) Option {
	return func(c *config) error {
		if bearer == "" {
			return fmt.Errorf("remotelock: token: %w: empty", driver.ErrInvalidOption)
		}
		if strings.IndexFunc(bearer, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			// The token itself never goes into an error.
			return fmt.Errorf("remotelock: token: %w: it contains white space or a control character", driver.ErrInvalidOption)
		}
		c.token = bearer
		return nil
	}
}

// WithRequestTimeout bounds each call to the service within the caller's
// context: a service that does not answer fails the call after d (plus the
// wait of a waiting Acquire) rather than when the caller's context ends. d
// must be positive. The default is DefaultRequestTimeout.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("remotelock: request timeout %v: %w: must be positive", d, driver.ErrInvalidOption)
		}
		c.requestTimeout = d
		return nil
	}
}

// WithMaxWait caps the wait the backend asks of the service in one Acquire
// call; a caller's longer wait is made of several calls. It must not exceed
// the service's own limit on a wait (its Limits.MaxWait), which refuses a
// longer one. d must be positive. The default is DefaultMaxWait.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("remotelock: max wait %v: %w: must be positive", d, driver.ErrInvalidOption)
		}
		c.maxWait = d
		return nil
	}
}

// WithGRPC makes the backend speak gRPC, which needs HTTP/2 end to end
// (h2c for an http:// URL, TLS with ALPN for https://). The default is the
// Connect protocol, binary protobuf over HTTP/2 or HTTP/1.1: the service
// serves both on one port, the Connect protocol passes through any HTTP
// proxy or load balancer, and its errors need no HTTP trailers.
func WithGRPC() Option {
	return func(c *config) error {
		c.grpc = true
		return nil
	}
}

// WithLossWatch makes the backend learn of a lost lock as soon as the
// service reports it, rather than at the lock's next renewal: it keeps one
// Watch stream of the tenant's keys open (from the first grant to Close)
// and ends a grant's Lost context when the stream reports that the grant
// expired or was force-released. A release it did not make (a forced
// release through another instance of the service, which that instance
// sees only as the key gone) makes it ask the service at once whether the
// grant is still held. Every event of the tenant then crosses the
// network to this backend, so it suits backends that hold few, long locks
// among a quiet tenant's keys. The default is off.
func WithLossWatch() Option {
	return func(c *config) error {
		c.watchLoss = true
		return nil
	}
}
