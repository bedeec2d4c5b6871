package pglock

import "time"

// Option configures a Backend.
type Option func(*options)

type options struct {
	poolWait     time.Duration
	keepalive    time.Duration
	ns           *int32
	noRows       bool
	cleanupEvery time.Duration
	cleanupBatch int
	retention    time.Duration
}

func defaultOptions() options {
	return options{poolWait: time.Second, keepalive: 5 * time.Second,
		cleanupEvery: time.Minute, cleanupBatch: 1000, retention: 10 * time.Minute}
}

// WithPoolWait bounds how long a single acquisition attempt waits for a free
// connection of the pool before failing with ErrPoolExhausted: at most d and
// at least 3/4 of d, since attempts that start close together share one
// deadline. A waiting lock (distlock.WithWait) waits for a connection within
// its own wait instead. The default is 1s.
func WithPoolWait(d time.Duration) Option { return func(o *options) { o.poolWait = d } }

// WithKeepalive caps the interval of the keepalive query on each pinned
// connection; the interval is a third of the lease, at most d. A dead session
// is reported lost within it. The default is 5s.
func WithKeepalive(d time.Duration) Option { return func(o *options) { o.keepalive = d } }

// WithNamespace maps keys with NamespacedKeyID(ns, key) instead of KeyID, so
// that applications sharing a database can keep their locks apart. The
// default is no namespace.
func WithNamespace(ns int32) Option { return func(o *options) { o.ns = &ns } }

// WithCleanupInterval sets how often the backend deletes stale holder rows;
// 0 turns the periodic cleanup off (call Cleanup yourself). The default is
// one minute.
func WithCleanupInterval(d time.Duration) Option { return func(o *options) { o.cleanupEvery = d } }

// WithCleanupBatch caps the rows one cleanup deletes. The default is 1000.
func WithCleanupBatch(n int) Option { return func(o *options) { o.cleanupBatch = n } }

// WithRetention sets how long after its lease ended the row of a key nobody
// holds stays (Inspect reports its last fence meanwhile). The default is 10
// minutes.
func WithRetention(d time.Duration) Option { return func(o *options) { o.retention = d } }

// WithoutHolderRows skips the holder table: an acquisition is then only the
// advisory lock and a fence from the sequence, in one statement that writes
// nothing, and a renewal only confirms the session. Inspect still reports
// Held from pg_locks, but no fence, time to live or metadata, and List finds
// nothing. The default is to keep holder rows.
func WithoutHolderRows() Option { return func(o *options) { o.noRows = true } }
