package dynamolock

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
	retention      time.Duration
	// now is the clock of every duration the backend measures (how long it
	// has seen a record version), read only for differences of its
	// monotonic readings; and of the wall-clock fields it writes for garbage
	// collection and a new item's first fence. Tests replace it.
	now func() time.Time
}

const (
	// DefaultRequestTimeout bounds each request to DynamoDB, its retries
	// included, unless WithRequestTimeout says otherwise.
	DefaultRequestTimeout = 5 * time.Second
	// DefaultConnectTimeout bounds opening a connection to DynamoDB for a
	// client that Open builds, unless Config.ConnectTimeout says otherwise.
	DefaultConnectTimeout = 5 * time.Second
	// DefaultRetention is how long an item stays after its lock was released
	// or last renewed before DynamoDB's Time to Live may delete it, unless
	// WithRetention says otherwise.
	DefaultRetention = 24 * time.Hour
)

func defaultOptions() config {
	return config{requestTimeout: DefaultRequestTimeout, retention: DefaultRetention, now: time.Now}
}

// newConfig applies opts to the defaults.
func newConfig(opts []Option) (config, error) {
	c := defaultOptions()
	for _, o := range opts {
		if err := o(&c); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

func invalid(name string, v any, want string) error {
	return fmt.Errorf("dynamolock: %s(%v): %w: %s", name, v, driver.ErrInvalidOption, want)
}

// WithRequestTimeout bounds each request to DynamoDB, the SDK's retries of it
// included, also when the caller's context has no deadline. It must be
// positive. The default is DefaultRequestTimeout (5s).
func WithRequestTimeout(d time.Duration) Option {
	return func(o *config) error {
		if d <= 0 {
			return invalid("WithRequestTimeout", d, "must be positive")
		}
		o.requestTimeout = d
		return nil
	}
}

// WithRetention sets how far past a release, or past the end of the last
// lease granted or renewed, the backend sets an item's expires_at attribute:
// the time after which DynamoDB's Time to Live, where the table has it on,
// may delete the item. It must be at least one hour (see the package doc:
// the clocks of the clients must stay within it of the true time). The
// default is DefaultRetention (24h).
func WithRetention(d time.Duration) Option {
	return func(o *config) error {
		if d < time.Hour {
			return invalid("WithRetention", d, "must be at least 1h")
		}
		o.retention = d
		return nil
	}
}
