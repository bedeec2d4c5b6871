package redlock

import (
	"fmt"
	"time"

	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
)

const (
	// DefaultRequestTimeout bounds each request to a node without
	// WithRequestTimeout.
	DefaultRequestTimeout = redislock.DefaultRequestTimeout
	// DefaultDialTimeout bounds a connection attempt of the clients Open
	// builds, without WithDialTimeout.
	DefaultDialTimeout = redislock.DefaultDialTimeout
	// DefaultDriftRate and DefaultDriftMargin make the clock-drift margin
	// taken off every validity without WithDrift: lease×0.01 + 2ms.
	DefaultDriftRate   = 0.01
	DefaultDriftMargin = 2 * time.Millisecond
	// MinNodeTimeout is the least time Acquire and Renew wait for a node's
	// reply when WithNodeTimeout is not set (unless the lease leaves less).
	MinNodeTimeout = 50 * time.Millisecond
)

// Option configures a Backend.
type Option func(*config) error

type config struct {
	prefix         string
	requestTimeout time.Duration
	dialTimeout    time.Duration
	nodeTimeout    time.Duration // 0: a tenth of the time to live, at least MinNodeTimeout
	driftRate      float64
	driftMargin    time.Duration
}

// WithPrefix sets the prefix of every Redis key the backend writes on every
// node; redislock.WithPrefix says what it may hold. The default is
// redislock.DefaultPrefix ("distlock:").
func WithPrefix(p string) Option {
	return func(c *config) error {
		c.prefix = p
		return nil
	}
}

// WithRequestTimeout bounds each request to one node (Release, Inspect,
// ForceRelease, List's inspections, the version check of New and Open) on
// top of the caller's context, and caps the node timeout. It must be
// positive. The default is DefaultRequestTimeout (5s); Open reads it from
// the URL parameter request_timeout.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.requestTimeout = d
		return nil
	}
}

// WithDialTimeout bounds each connection attempt of the clients that Open
// builds. It must be positive. The default is DefaultDialTimeout (5s); Open
// reads it from the URL parameter dial_timeout. New and NewRueidis use the
// clients' own settings.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.dialTimeout = d
		return nil
	}
}

// WithNodeTimeout bounds how long Acquire and Renew wait for each node's
// reply: a node slower than that counts as failed, and the time waited is
// charged to the validity. It must be positive. The default is a tenth of
// the time to live requested, but at least MinNodeTimeout (50ms); either
// way at most the request timeout, and never past the moment the validity
// would be used up. Open reads it from the URL parameter node_timeout.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.nodeTimeout = d
		return nil
	}
}

// WithDrift sets the clock-drift margin taken off the validity of a grant:
// lease×rate + margin. rate must be in [0, 0.5) and margin at least 0. The
// default is DefaultDriftRate (0.01) and DefaultDriftMargin (2ms), the
// margin distlock's client also takes off its local validity deadline;
// Open reads them from the URL parameters drift_rate and drift_margin.
//
// Acquire refuses a grant whose validity, after this margin, is used up.
// distlock's client cannot be told a margin other than its own: with a
// larger one here, its deadline is still lease − (lease×0.01 + 2ms) from
// the moment the request was sent.
func WithDrift(rate float64, margin time.Duration) Option {
	return func(c *config) error {
		c.driftRate, c.driftMargin = rate, margin
		return nil
	}
}

func newConfig(opts []Option) (config, error) {
	c := config{prefix: redislock.DefaultPrefix, requestTimeout: DefaultRequestTimeout, dialTimeout: DefaultDialTimeout,
		driftRate: DefaultDriftRate, driftMargin: DefaultDriftMargin}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return c, err
		}
	}
	for _, d := range []struct {
		name string
		d    time.Duration
		set  bool
	}{{"request timeout", c.requestTimeout, true}, {"dial timeout", c.dialTimeout, true}, {"node timeout", c.nodeTimeout, c.nodeTimeout != 0}} {
		if d.set && d.d <= 0 {
			return c, fmt.Errorf("redlock: %s %v: %w: must be positive", d.name, d.d, driver.ErrInvalidOption)
		}
	}
	if !(c.driftRate >= 0 && c.driftRate < 0.5) || c.driftMargin < 0 {
		return c, fmt.Errorf("redlock: drift rate %v, margin %v: %w: want a rate in [0, 0.5) and a margin of at least 0",
			c.driftRate, c.driftMargin, driver.ErrInvalidOption)
	}
	return c, nil
}

// nodeOptions are the options every node's redislock backend gets.
func (c config) nodeOptions() []redislock.Option {
	return []redislock.Option{redislock.WithPrefix(c.prefix), redislock.WithRequestTimeout(c.requestTimeout),
		redislock.WithDialTimeout(c.dialTimeout), redislock.WithWatchedReleases()}
}

// watchWait is how long Watch waits for a majority of the nodes to take the
// watch: the node timeout, or MinNodeTimeout if it is not set, at most the
// request timeout.
func (c config) watchWait() time.Duration {
	w := c.nodeTimeout
	if w == 0 {
		w = MinNodeTimeout
	}
	return min(w, c.requestTimeout)
}

// drift is the margin taken off the validity of a grant of ttl.
func (c config) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.driftRate) + c.driftMargin
}

// replyWait is how long Acquire and Renew of ttl wait for the nodes' replies.
// validity is ttl less the drift margin, which is positive.
func (c config) replyWait(ttl, validity time.Duration) time.Duration {
	w := c.nodeTimeout
	if w == 0 {
		w = max(ttl/10, MinNodeTimeout)
	}
	return min(w, c.requestTimeout, validity)
}
