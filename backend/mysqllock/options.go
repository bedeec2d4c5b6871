package mysqllock

import (
	"time"

	"github.com/distlock/distlock/internal/pinned"
)

// Option configures a Backend. New returns an error matching
// driver.ErrInvalidOption, naming the option, for a value out of range.
type Option func(*config) error

type config struct {
	pinned.Settings
	killOnForce bool
}

// Defaults of the options that have one.
const (
	// DefaultRequestTimeout bounds each request to the server (WithRequestTimeout).
	DefaultRequestTimeout = pinned.DefaultRequestTimeout
	// DefaultConnectTimeout is the dial timeout of a handle that Open
	// creates when its URL sets no "timeout".
	DefaultConnectTimeout = 5 * time.Second
	// DefaultKeepalive is the longest interval between two checks of a held
	// lock's session (WithKeepalive).
	DefaultKeepalive = time.Second
	// MinKeepalive is the shortest interval WithKeepalive accepts.
	MinKeepalive = pinned.MinKeepalive
	// DefaultPoolWait bounds the wait for a free connection (WithPoolWait).
	DefaultPoolWait = pinned.DefaultPoolWait
)

// newConfig applies opts to the defaults.
func newConfig(opts []Option) (config, error) {
	return pinned.Apply(config{Settings: pinned.NewSettings(pinned.Spec{
		Name: pkg, Keepalive: DefaultKeepalive, MinRetention: time.Minute})}, opts)
}

// WithPoolWait bounds how long an acquisition attempt waits for a free
// connection of the handle before failing with ErrPoolExhausted. Every held
// lock pins one connection, so a handle whose SetMaxOpenConns is reached by
// held locks has none to give. A waiting lock (distlock.WithWait) waits for a
// connection within its own wait instead. d must be positive. The default is
// 1s (DefaultPoolWait).
func WithPoolWait(d time.Duration) Option {
	return func(o *config) error { return o.SetPoolWait(d) }
}

// WithKeepalive caps the interval between two checks (COM_PING) of each held
// lock's pinned session: the interval is a third of the lease, at most d. A
// session the server ended (KILL, a restart, wait_timeout, a cut link) is
// noticed by the first check or call on it after it ended, so this is the
// window in which the holder still believes it holds a lock that another
// client may already have. d must be at least MinKeepalive (10ms). The
// default is 1s (DefaultKeepalive).
func WithKeepalive(d time.Duration) Option {
	return func(o *config) error { return o.SetKeepalive(d) }
}

// WithRequestTimeout bounds each request the backend sends to the server
// (an acquisition attempt, a renewal, a release, Inspect, List, Cleanup,
// ForceRelease) when the caller's context allows longer; a waiting
// acquisition (driver.Waiter) waits as long as its context instead. A
// statement on a pinned connection that runs out closes the connection,
// which ends its session and frees its lock. d must be positive; Open also
// reads it from the URL parameter request_timeout (e.g. "2s"). The default
// is 5s (DefaultRequestTimeout).
func WithRequestTimeout(d time.Duration) Option {
	return func(o *config) error { return o.SetRequestTimeout(d) }
}

// WithKillOnForceRelease lets ForceRelease free a key by ending the session
// that holds it (KILL CONNECTION): a named lock belongs to its session, and
// nothing else can take it away. Everything else that session does ends with
// it, and the user needs the privilege to kill it (its own sessions, or
// CONNECTION_ADMIN / SUPER). Open reads it from the URL parameter
// kill_on_force_release. The default is off: ForceRelease then returns an
// error matching errors.ErrUnsupported.
func WithKillOnForceRelease(on bool) Option {
	return func(o *config) error {
		o.killOnForce = on
		return nil
	}
}

// WithCleanupInterval sets how often the backend deletes stale rows of the
// holder table; 0 turns the periodic cleanup off (call Cleanup yourself). d
// must not be negative. The default is one minute.
func WithCleanupInterval(d time.Duration) Option {
	return func(o *config) error { return o.SetCleanupInterval(d) }
}

// WithCleanupBatch caps the rows one cleanup deletes. n must be positive. The
// default is 1000.
func WithCleanupBatch(n int) Option {
	return func(o *config) error { return o.SetCleanupBatch(n) }
}

// WithRetention sets how long after its lease ended the row of a key nobody
// holds stays (Inspect reports its last fence meanwhile). Fences stay
// increasing across a deleted row as long as the server's clock does not go
// back by more than the retention. d must be at least a minute. The default
// is 10 minutes.
func WithRetention(d time.Duration) Option {
	return func(o *config) error { return o.SetRetention(d) }
}
