package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
)

// ReplicaAckError says that fewer replicas than WithReplicaAck asks for
// acknowledged a lock's grant or renewal within the time WAIT waited.
//
// A grant's error matches driver.ErrNotAcquired once the backend has
// released the key by the grant's token (or found it no longer held): the
// key is free, as if never granted. If that release failed, the error
// matches the release's error instead, and not driver.ErrNotAcquired, so
// that the caller knows the token may still hold the key (distlock's client
// then releases it in the background). A renewal's error matches no
// sentinel: the renewal is not confirmed, and the client retries it while
// the lock's validity lasts.
type ReplicaAckError struct {
	// Renewal is set for a renewal, unset for a grant.
	Renewal bool
	// Acked is how many replicas acknowledged; Want is how many
	// WithReplicaAck asks for.
	Acked, Want int
	// Waited is how long WAIT was told to wait: the WithReplicaAck timeout,
	// or less when the request's context ended sooner.
	Waited time.Duration
	// ReleaseErr is the error of releasing the unacknowledged grant, nil
	// if it was released.
	ReleaseErr error
}

// Error says how many replicas acknowledged within what time, and what
// became of the key.
func (e *ReplicaAckError) Error() string {
	what := fmt.Sprintf("%d of %d replicas acknowledged the", e.Acked, e.Want)
	switch {
	case e.Renewal:
		return fmt.Sprintf("redislock: %s renewal within %v (WAIT)", what, e.Waited)
	case e.ReleaseErr != nil:
		return fmt.Sprintf("redislock: %s grant within %v (WAIT), and releasing it failed: %v", what, e.Waited, e.ReleaseErr)
	}
	return fmt.Sprintf("%v: %s grant within %v (WAIT); the key was released", driver.ErrNotAcquired, what, e.Waited)
}

// Unwrap returns driver.ErrNotAcquired for a grant that was released, the
// release's error for one that could not be, and nothing for a renewal.
func (e *ReplicaAckError) Unwrap() error {
	switch {
	case e.Renewal:
		return nil
	case e.ReleaseErr != nil:
		return e.ReleaseErr
	}
	return driver.ErrNotAcquired
}

// acks reports whether grants and renewals wait for replicas.
func (b *Backend) acks() bool { return b.ack.replicas > 0 }

// evalIntAcked runs s and WAIT on one connection within the request
// timeout (see call) and returns the script's reply, how many replicas
// acknowledged, and how long WAIT was told to wait: the WithReplicaAck
// timeout, or half of what is left of the request's deadline if that is
// less, so that the reply can come back before the deadline. (Redis ends a
// WAIT at the pace of its cron, every 100ms at its default hz 10, so a reply
// to a short WAIT may still come after the deadline: the request then fails
// with the context's error, and the grant is unknown.)
func (b *Backend) evalIntAcked(ctx context.Context, s script, keys []string, args ...string) (n int64, acked int, wait time.Duration, err error) {
	err = b.call(ctx, func(ctx context.Context) error {
		wait = b.ack.timeout
		if d, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(d)/2)
		}
		wait = max(wait, time.Millisecond)
		n, acked, err = b.st.evalIntAcked(ctx, s, keys, args, b.ack.replicas, wait)
		return err
	})
	return n, acked, wait, err
}

// refuseUnacked releases token's grant of key, which acked replicas
// acknowledged within wait, fewer than asked for, and returns the
// grant's *ReplicaAckError. The release gets a context of its own, with the
// request timeout, since ctx may have ended while WAIT waited.
func (b *Backend) refuseUnacked(ctx context.Context, key, token string, acked int, wait time.Duration) error {
	e := &ReplicaAckError{Acked: acked, Want: b.ack.replicas, Waited: wait}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	if err := b.Release(rctx, key, token); err != nil && !errors.Is(err, driver.ErrNotHeld) {
		e.ReleaseErr = err
	}
	return e
}

// confirm waits for the replicas to acknowledge token's grant of key,
// which reached the waiter without a WAIT of its own (a release passed it
// on, or a step of the queue took it, on another connection): it renews
// the grant for ttl and sends WAIT on the same connection. Replication
// keeps the order of writes, so a replica that acknowledged the renewal
// has the grant. A grant the replicas did not acknowledge is released.
func (b *Backend) confirm(ctx context.Context, key, token string, ttl time.Duration) error {
	lock, fence, meta := b.lockNames(key)
	ok, acked, wait, err := b.evalIntAcked(ctx, scriptRenew, []string{lock, meta, fence}, token, millis(ttl))
	switch {
	case err != nil:
		return driver.Wrap("redislock", err)
	case ok != 1:
		return fmt.Errorf("%w: the grant ended before its replicas acknowledged it", driver.ErrNotAcquired)
	case acked < b.ack.replicas:
		return b.refuseUnacked(ctx, key, token, acked, wait)
	}
	return nil
}

// waitMillis is wait in whole milliseconds for WAIT, at least 1: WAIT 0
// blocks for ever.
func waitMillis(wait time.Duration) int64 { return max(wait.Milliseconds(), 1) }
