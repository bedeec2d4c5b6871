package pglock

import (
	"fmt"
	"time"

	"github.com/distlock/distlock/internal/pinned"
)

// Option configures a Backend. New returns an error matching
// driver.ErrInvalidOption, naming the option, for a value out of range.
type Option func(*config) error

type config struct {
	pinned.Settings
	watchDelay     time.Duration
	ns             *int32
	keyIDs         KeyIDs // "" unless WithKeyIDs: the database's recorded scheme
	rows           rowMode
	forceTerminate bool
}

// Defaults of the options that have one.
const (
	// DefaultRequestTimeout bounds each request to the server (WithRequestTimeout).
	DefaultRequestTimeout = pinned.DefaultRequestTimeout
	// DefaultConnectTimeout bounds a new connection of a pool that Open
	// creates when the connection string sets no connect_timeout.
	DefaultConnectTimeout = 5 * time.Second
	// MinKeepalive is the shortest interval WithKeepalive accepts.
	MinKeepalive = pinned.MinKeepalive
	// DefaultWatchDelay is how long a held lock goes unwatched after its
	// grant (WithWatchDelay).
	DefaultWatchDelay = 5 * time.Millisecond
	// MaxWatchDelay is the longest delay WithWatchDelay accepts.
	MaxWatchDelay = time.Second
)

// rowMode is when holder rows are written: once a hold lasts the watch
// delay, at the grant when there is no delay, or as set.
func (o config) rowMode() rowMode {
	if o.rows == rowsLasting && o.watchDelay == 0 {
		return rowsAtGrant
	}
	return o.rows
}

// newOptions applies opts to the defaults.
func newOptions(opts []Option) (config, error) {
	return pinned.Apply(config{Settings: pinned.NewSettings(pinned.Spec{Name: pkg, Keepalive: 5 * time.Second}),
		watchDelay: DefaultWatchDelay}, opts)
}

// WithPoolWait bounds how long a single acquisition attempt waits for a free
// connection of the pool before failing with ErrPoolExhausted: at most d and
// at least 3/4 of d, since attempts that start close together share one
// deadline. A waiting lock (distlock.WithWait) waits for a connection within
// its own wait instead. d must be positive. The default is 1s.
func WithPoolWait(d time.Duration) Option {
	return func(o *config) error { return o.SetPoolWait(d) }
}

// WithKeepalive caps the interval of the keepalive query on each pinned
// connection; the interval is a third of the lease, at most d, counted from
// the last renewal, which confirms the session as well. A session the server
// ended is noticed on an idle connection as soon as it is watched
// (WithWatchDelay), and a failing keepalive reports one that broke; a
// connection that merely stopped answering (a partition) is given until the
// lease ends, plus the request timeout, before it is closed: cutting it
// sooner would end a healthy session on a slow link. d must be at least
// MinKeepalive (10ms). The default is 5s.
func WithKeepalive(d time.Duration) Option {
	return func(o *config) error { return o.SetKeepalive(d) }
}

// WithWatchDelay sets how long a held lock's connection goes unwatched after
// the grant. Watching a connection (see the package doc) costs a goroutine,
// started when the hold has lasted d (at most d/4 later, so that one timer
// serves every lock of the backend) and woken by each call on the connection;
// a lock released sooner never pays for it. The price is the window: a
// session the server ends during the delay is noticed when the watch starts,
// so at most 1.25·d after the grant, plus the milliseconds the socket takes
// to say so. 0 watches from the grant. d must be between 0 and MaxWatchDelay
// (1s). The default is 5ms (DefaultWatchDelay).
func WithWatchDelay(d time.Duration) Option {
	return func(o *config) error {
		if d < 0 || d > MaxWatchDelay {
			return o.Invalid("WithWatchDelay", d, fmt.Sprintf("want 0 (watch from the grant) up to %v", MaxWatchDelay))
		}
		o.watchDelay = d
		return nil
	}
}

// WithRequestTimeout bounds each request the backend sends to the server
// (an acquisition attempt, a renewal, an unlock, Inspect, List, Cleanup,
// ForceRelease) when the caller's context allows longer; a waiting
// acquisition (driver.Waiter) waits as long as its context instead, and a
// statement on a held lock's connection (a renewal, a keepalive) is never
// cut before the lease ends: it has d beyond the lease's end. An
// attempt whose request ran out may have taken the lock, so its connection
// is closed, which frees the lock on the server. d must be positive; Open
// also reads it from the URL parameter request_timeout (e.g. "2s"). The
// default is 5s (DefaultRequestTimeout).
func WithRequestTimeout(d time.Duration) Option {
	return func(o *config) error { return o.SetRequestTimeout(d) }
}

// WithNamespace maps keys with NamespacedKeyID(ns, key) instead of KeyID
// (LegacyNamespacedKeyID under KeyIDsFNV1a), so that applications sharing a
// database can keep their locks apart. The namespace takes the high 32 bits
// of the id and leaves 32 to the key: anyone who chooses keys finds one
// whose id equals a given key's in about 2^32 hashes (minutes of one CPU),
// and then blocks that key and learns whether it is held. So do not use a
// namespace with keys from untrusted input. The default is no namespace.
func WithNamespace(ns int32) Option {
	return func(o *config) error {
		o.ns = &ns
		return nil
	}
}

// WithKeyIDs sets the scheme that maps keys to advisory lock ids
// (KeyIDsSHA256 or KeyIDsFNV1a) and asserts it to the database. Without it a
// backend adopts the scheme the database records, and a database that
// records none gets KeyIDsSHA256 if it is new, KeyIDsFNV1a if an older
// version of pglock used it (its table distlock_pg_locks exists), since
// those versions lock FNV-1a ids. With it, a database that records another
// scheme makes Migrate, and so the first call, fail with
// ErrKeyIDsMismatch; one that records none gets k: WithKeyIDs(KeyIDsSHA256)
// on a database an older version used asserts that no client of such a
// version runs any more. Open also reads it from the URL parameter key_ids
// ("sha256" or "fnv1a"). The default is to adopt the database's scheme.
func WithKeyIDs(k KeyIDs) Option {
	return func(o *config) error {
		if k.valid() != nil {
			return o.Invalid("WithKeyIDs", fmt.Sprintf("%q", string(k)), fmt.Sprintf("want %q or %q", KeyIDsSHA256, KeyIDsFNV1a))
		}
		o.keyIDs = k
		return nil
	}
}

// WithCleanupInterval sets how often the backend deletes stale holder rows;
// 0 turns the periodic cleanup off (call Cleanup yourself). d must not be
// negative. The default is one minute.
func WithCleanupInterval(d time.Duration) Option {
	return func(o *config) error { return o.SetCleanupInterval(d) }
}

// WithCleanupBatch caps the rows one cleanup deletes. n must be positive. The
// default is 1000.
func WithCleanupBatch(n int) Option {
	return func(o *config) error { return o.SetCleanupBatch(n) }
}

// WithRetention sets how long after its lease ended the row of a key nobody
// holds stays (Inspect reports its last fence meanwhile). d must not be
// negative. The default is 10 minutes.
func WithRetention(d time.Duration) Option {
	return func(o *config) error { return o.SetRetention(d) }
}

// rowMode is when a hold's row is written to the holder table.
type rowMode int

const (
	rowsAtGrant rowMode = iota // in the acquisition statement
	rowsLasting                // once the hold lasts the watch delay
	rowsNone                   // never
)

// WithoutHolderRows skips the holder table: an acquisition is then only the
// advisory lock and a fence from the sequence, in one statement that writes
// nothing, and a renewal only confirms the session. Inspect still reports
// Held from pg_locks, but no fence, time to live or metadata, and List finds
// nothing, except for the locks of the backend asked. The default is to
// write a hold's row in the statement that takes the lock.
func WithoutHolderRows() Option {
	return func(o *config) error {
		o.rows = rowsNone
		return nil
	}
}

// WithDeferredHolderRows writes a hold's row once the hold has lasted the
// watch delay (WithWatchDelay, 5ms by default), on its pinned connection
// just before the watch starts, instead of in the statement that takes the
// lock. A hold released sooner writes nothing, so an acquisition costs what
// it costs WithoutHolderRows: the advisory lock and a fence, no write
// transaction (see docs/sql.md for the rates). What it gives up: another
// process's Inspect sees a hold younger than the delay as held, without
// fence, time to live or metadata, and its List and ForceRelease do not
// describe it; a free key's fence is not reported, since the last row may
// predate the last grant. The backend's own Inspect and List describe its
// holds from their grant. With a watch delay of 0 rows are written at the
// grant. The default is off: rows are written at the grant.
func WithDeferredHolderRows() Option {
	return func(o *config) error {
		o.rows = rowsLasting
		return nil
	}
}

// WithTerminateOnForceRelease lets ForceRelease free a key by ending the
// session that holds it with pg_terminate_backend: an advisory lock belongs
// to its session, and nothing else can take it away. Every lock and every
// transaction of that session ends with it, so enable it only where the
// locking role's sessions do nothing else (and the role may signal them:
// pg_signal_backend). The default is off: ForceRelease then returns an error
// matching errors.ErrUnsupported.
func WithTerminateOnForceRelease(on bool) Option {
	return func(o *config) error {
		o.forceTerminate = on
		return nil
	}
}
