package redislock

import (
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

const (
	// DefaultPrefix is the key prefix used without WithPrefix.
	DefaultPrefix = "distlock:"
	// DefaultRequestTimeout bounds each request without WithRequestTimeout.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultDialTimeout bounds a connection attempt of the client Open
	// builds, without WithDialTimeout.
	DefaultDialTimeout = 5 * time.Second
)

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix         string
	requestTimeout time.Duration
	dialTimeout    time.Duration
}

// WithPrefix sets the prefix of every Redis key and channel the backend uses.
// It must not contain braces: the backend puts the lock key in a hash tag
// right after it. The default is DefaultPrefix.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithRequestTimeout bounds each request the backend sends (one script run,
// the version check of New, one SUBSCRIBE), on top of the caller's context:
// a request gets the sooner of the context's deadline and this timeout. It
// must be positive. The default is DefaultRequestTimeout (5s); Open reads
// it from the URL parameter request_timeout.
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTimeout = d } }

// WithDialTimeout bounds each connection attempt of the client that Open
// builds (rueidis's Dialer.Timeout). It must be positive. The default is
// DefaultDialTimeout (5s); Open also reads it from the URL parameter
// dial_timeout. New and NewRueidis use the client's own setting (go-redis
// DialTimeout and rueidis Dialer.Timeout, both 5s by default) and ignore it.
func WithDialTimeout(d time.Duration) Option { return func(c *config) { c.dialTimeout = d } }

func newConfig(opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix, requestTimeout: DefaultRequestTimeout, dialTimeout: DefaultDialTimeout}
	for _, o := range opts {
		o(&c)
	}
	if err := positive("request timeout", c.requestTimeout); err != nil {
		return c, err
	}
	if err := positive("dial timeout", c.dialTimeout); err != nil {
		return c, err
	}
	return c, validatePrefix(c.prefix)
}

func positive(what string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("redislock: %s %v: %w: must be positive", what, d, driver.ErrInvalidOption)
	}
	return nil
}
