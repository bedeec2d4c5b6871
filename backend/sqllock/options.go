package sqllock

import "time"

// Option configures a Backend.
type Option func(*options)

type options struct {
	cleanupEvery time.Duration
	cleanupBatch int
	retention    time.Duration
}

func defaultOptions() options {
	return options{cleanupEvery: time.Minute, cleanupBatch: 1000, retention: 10 * time.Minute}
}

// WithCleanupInterval sets how often the backend deletes long-expired rows;
// 0 turns the periodic cleanup off (call Cleanup yourself). The default is
// one minute.
func WithCleanupInterval(d time.Duration) Option { return func(o *options) { o.cleanupEvery = d } }

// WithCleanupBatch caps the rows one cleanup deletes. The default is 1000.
func WithCleanupBatch(n int) Option { return func(o *options) { o.cleanupBatch = n } }

// WithRetention sets how long the row of an expired lease stays before
// cleanup may delete it; Inspect reports its last fence meanwhile. The
// default is 10 minutes.
func WithRetention(d time.Duration) Option { return func(o *options) { o.retention = d } }
