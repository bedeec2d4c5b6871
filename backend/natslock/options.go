package natslock

import (
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

// Option configures a Backend. New and Open reject an invalid value with an
// error matching driver.ErrInvalidOption that names the option.
type Option func(*config) error

type config struct {
	requestTimeout time.Duration
}

const (
	// DefaultRequestTimeout bounds each call to the store (one to three
	// requests), unless WithRequestTimeout says otherwise.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultConnectTimeout bounds the first connection to a server for a
	// connection that Open makes, unless Config.ConnectTimeout says
	// otherwise.
	DefaultConnectTimeout = 5 * time.Second
)

// newConfig applies opts to the defaults.
func newConfig(opts []Option) (config, error) {
	c := config{requestTimeout: DefaultRequestTimeout}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// WithRequestTimeout bounds each call to the store, also when the caller's
// context has no deadline. It must be positive. The default is
// DefaultRequestTimeout (5s).
func WithRequestTimeout(d time.Duration) Option {
	return func(o *config) error {
		if d <= 0 {
			return fmt.Errorf("natslock: WithRequestTimeout(%v): %w: must be positive", d, driver.ErrInvalidOption)
		}
		o.requestTimeout = d
		return nil
	}
}
