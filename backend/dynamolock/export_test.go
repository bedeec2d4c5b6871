package dynamolock

import "time"

// WithClock makes the backend read time from now instead of time.Now.
func WithClock(now func() time.Time) Option {
	return func(o *config) error {
		o.now = now
		return nil
	}
}
