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
	// DefaultWaiterTimeout is how long a waiter's place in a key's queue
	// lasts without a refresh, without WithWaiterTimeout.
	DefaultWaiterTimeout = time.Second
	// DefaultReplicaAckTimeout is how long a grant or renewal waits for its
	// replicas' acknowledgement when the URL parameter replica_ack is given
	// without replica_ack_timeout.
	DefaultReplicaAckTimeout = time.Second
)

// Option configures a Backend.
type Option func(*config) error

type config struct {
	prefix          string
	requestTimeout  time.Duration
	dialTimeout     time.Duration
	waiterTimeout   time.Duration
	watchedReleases bool
	noLossTracking  bool
	ack             replicaAck
}

// replicaAck is what WithReplicaAck asks for; replicas 0 asks for nothing.
type replicaAck struct {
	replicas int
	timeout  time.Duration
}

// WithPrefix sets the prefix of every Redis key and channel the backend uses.
// It must not contain braces: the backend puts the lock key in a hash tag
// right after it. The default is DefaultPrefix.
func WithPrefix(p string) Option {
	return func(c *config) error {
		c.prefix = p
		return nil
	}
}

// WithRequestTimeout bounds each request the backend sends (one script run,
// the version check of New, one SUBSCRIBE), on top of the caller's context:
// a request gets the sooner of the context's deadline and this timeout. It
// must be positive. The default is DefaultRequestTimeout (5s); Open reads
// it from the URL parameter request_timeout.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.requestTimeout = d
		return nil
	}
}

// WithDialTimeout bounds each connection attempt of the client that Open
// builds (rueidis's Dialer.Timeout). It must be positive. The default is
// DefaultDialTimeout (5s); Open also reads it from the URL parameter
// dial_timeout. New and NewRueidis use the client's own setting (go-redis
// DialTimeout and rueidis Dialer.Timeout, both 5s by default) and ignore it.
func WithDialTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.dialTimeout = d
		return nil
	}
}

// WithWaiterTimeout sets how long a waiter's place in a key's queue lasts
// unless the waiter refreshes it, which a live waiter does several times
// within it. It bounds how long a waiter whose process died, or lost Redis,
// can hold up the waiters behind it; a live waiter stalled that long (a
// paused process) loses its place and queues again at the end. It must be at
// least 50ms. The default is DefaultWaiterTimeout (1s); Open reads it from
// the URL parameter waiter_timeout.
func WithWaiterTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.waiterTimeout = d
		return nil
	}
}

// WithWatchedReleases makes every release through the backend wake the
// key's watchers (Watch), at the cost of one more call per release on the
// server (a ZRANGE of the watchers, absent unless somebody watches: about
// 1.5µs of its time). Without it only the releases that pass the key to a
// queued waiter, and force releases, wake them. distlock's client does not
// watch a Redis backend, whose waiters queue; Redlock builds its nodes with
// it, since its waiters watch.
func WithWatchedReleases() Option {
	return func(c *config) error {
		c.watchedReleases = true
		return nil
	}
}

// WithoutLossTracking turns off what Open and Dial otherwise do on Redis
// 6 and later: read every key held for 100 ms with client-side tracking,
// so that Redis tells the backend when the key is next written, and a
// deletion, an eviction, an expiry, a failover that lost the key or
// another client's write ends the hold's driver.Grant.Lost within a round
// trip, with the reason deleted or taken, instead of at its next renewal.
// Tracking costs a read per hold that lives past 100 ms and one per
// renewal, and an entry per such key in Redis's tracking table; a grant
// whose Lost nobody follows (driver.AcquireRequest.Unfollowed) is not
// tracked. NewGoRedis and NewRueidis never track, since the client is the
// caller's.
func WithoutLossTracking() Option {
	return func(c *config) error {
		c.noLossTracking = true
		return nil
	}
}

// WithReplicaAck makes the backend confirm a lock's grant, and its
// renewal, only once replicas replicas have acknowledged it: right after the
// write, WAIT replicas timeout runs on the connection that made it (on a
// Cluster, a connection to the master of the key's slot), in the same round
// trip for Acquire, Handoff and Renew. A grant that reached the waiter
// otherwise (a release passed it on, or a queued step took it) is confirmed
// by a renewal and WAIT, one round trip more.
//
// A grant that fewer replicas acknowledge within timeout is released by its
// token and refused with a *ReplicaAckError that matches
// driver.ErrNotAcquired. A renewal that fewer acknowledge returns a
// *ReplicaAckError that matches no sentinel: the client counts the renewal
// as failed, retries it, and reports the lock lost once its validity, from
// the last acknowledged renewal, runs out. WAIT waits at most timeout, less
// if the request's context (its deadline, or the request timeout) ends
// sooner.
//
// WAIT narrows the window in which a failover loses a grant; it does not
// close it: a failover may promote a replica that has not acknowledged, and
// an old primary cut off from the others still grants. Semaphores and
// read-write locks do not wait.
//
// replicas 0 turns it off, the default; a negative count, or a timeout that
// is not positive or not below the request timeout, is refused with
// driver.ErrInvalidOption. Open reads it from the URL parameters
// replica_ack and replica_ack_timeout (default DefaultReplicaAckTimeout).
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return func(c *config) error {
		c.ack = replicaAck{replicas: replicas, timeout: timeout}
		return nil
	}
}

// minWaiterTimeout is the least WithWaiterTimeout takes: a waiter refreshes
// its place every fifth to third of it, each refresh a round trip.
const minWaiterTimeout = 50 * time.Millisecond

func newConfig(opts []Option) (config, error) {
	c := config{prefix: DefaultPrefix, requestTimeout: DefaultRequestTimeout, dialTimeout: DefaultDialTimeout, waiterTimeout: DefaultWaiterTimeout}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return c, err
		}
	}
	if err := positive("request timeout", c.requestTimeout); err != nil {
		return c, err
	}
	if err := positive("dial timeout", c.dialTimeout); err != nil {
		return c, err
	}
	if c.waiterTimeout < minWaiterTimeout {
		return c, fmt.Errorf("redislock: waiter timeout %v: %w: must be at least %v", c.waiterTimeout, driver.ErrInvalidOption, minWaiterTimeout)
	}
	if err := c.ack.valid(c.requestTimeout); err != nil {
		return c, err
	}
	return c, validatePrefix(c.prefix)
}

// valid checks a replica acknowledgement against the request timeout,
// which bounds the WAIT as every request.
func (a replicaAck) valid(requestTimeout time.Duration) error {
	switch {
	case a.replicas < 0:
		return fmt.Errorf("redislock: replica acknowledgements %d: %w: must not be negative", a.replicas, driver.ErrInvalidOption)
	case a.replicas == 0:
		return nil
	case a.timeout <= 0:
		return fmt.Errorf("redislock: replica acknowledgement timeout %v: %w: must be positive", a.timeout, driver.ErrInvalidOption)
	case a.timeout >= requestTimeout:
		return fmt.Errorf("redislock: replica acknowledgement timeout %v: %w: must be below the request timeout (%v)", a.timeout, driver.ErrInvalidOption, requestTimeout)
	}
	return nil
}

func positive(what string, d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("redislock: %s %v: %w: must be positive", what, d, driver.ErrInvalidOption)
	}
	return nil
}
