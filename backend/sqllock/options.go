package sqllock

import (
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

// Option configures a Backend. New rejects an invalid value with an error
// matching driver.ErrInvalidOption that names the option.
type Option func(*config) error

type config struct {
	cleanupEvery   time.Duration // 0: no periodic cleanup
	cleanupBatch   int
	retention      time.Duration
	requestTimeout time.Duration
	noQueue        bool
	noLossNotice   bool
}

// WithoutWaitQueue turns the queue of waiting clients off (PostgreSQL; see
// Watch): each client that waits for a key then retries on every release
// notice of it, and whichever is first takes it, as does a client that
// tries without waiting. That saves a waiting client a connection and two
// round trips per wait, which pays where one client does all the waiting
// (its own waiters already line up in order), at the price of fairness
// between clients and of every waiting client's attempt on each release.
// Give every client of a key the same setting: one without the queue takes
// a key ahead of the clients queued for it. The default is to queue.
func WithoutWaitQueue() Option {
	return func(o *config) error {
		o.noQueue = true
		return nil
	}
}

// WithoutLossNotice turns off the immediate notice of a forced release to
// the holder (PostgreSQL): without it, a holder learns at its next renewal.
// The notice costs the backend one listening connection, shared with its
// waiters, from its first grant to Close.
func WithoutLossNotice() Option {
	return func(o *config) error {
		o.noLossNotice = true
		return nil
	}
}

// DefaultRequestTimeout bounds each statement the backend runs unless
// WithRequestTimeout says otherwise.
const DefaultRequestTimeout = 5 * time.Second

// maxCleanupBatch keeps one cleanup statement from locking a large part of
// the table.
const maxCleanupBatch = 100_000

func defaultOptions() config {
	return config{
		cleanupEvery:   time.Minute,
		cleanupBatch:   1000,
		retention:      10 * time.Minute,
		requestTimeout: DefaultRequestTimeout,
	}
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
	return fmt.Errorf("sqllock: %s(%v): %s: %w", name, v, want, driver.ErrInvalidOption)
}

// WithCleanupInterval sets how often the backend deletes long-expired rows;
// it must be positive. The default is one minute.
func WithCleanupInterval(d time.Duration) Option {
	return func(o *config) error {
		if d <= 0 {
			return invalid("WithCleanupInterval", d, "must be positive (WithManualCleanup turns the loop off)")
		}
		o.cleanupEvery = d
		return nil
	}
}

// WithManualCleanup turns the periodic cleanup off: call Cleanup yourself,
// or expired rows stay. The default is a cleanup every minute.
func WithManualCleanup() Option {
	return func(o *config) error {
		o.cleanupEvery = 0
		return nil
	}
}

// WithCleanupBatch caps the rows one cleanup deletes, from 1 to 100000. The
// default is 1000.
func WithCleanupBatch(n int) Option {
	return func(o *config) error {
		if n <= 0 || n > maxCleanupBatch {
			return invalid("WithCleanupBatch", n, fmt.Sprintf("must be from 1 to %d", maxCleanupBatch))
		}
		o.cleanupBatch = n
		return nil
	}
}

// WithRetention sets how long the row of an expired or (MariaDB and MySQL)
// released lease stays before cleanup may delete it; Inspect reports its
// last fence meanwhile. It must be positive. The default is 10 minutes.
func WithRetention(d time.Duration) Option {
	return func(o *config) error {
		if d <= 0 {
			return invalid("WithRetention", d, "must be positive")
		}
		o.retention = d
		return nil
	}
}

// WithRequestTimeout bounds each statement the backend runs, and the
// connection it may have to open for it, also when the caller's context has
// no deadline. It must be positive. The default is DefaultRequestTimeout
// (5s).
func WithRequestTimeout(d time.Duration) Option {
	return func(o *config) error {
		if d <= 0 {
			return invalid("WithRequestTimeout", d, "must be positive")
		}
		o.requestTimeout = d
		return nil
	}
}
