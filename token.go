package distlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
)

// TokenGrant is a lock acquired for a holder in another process, which proves
// itself with Token: see AcquireToken.
type TokenGrant struct {
	Key   string
	Token string
	// Fence strictly increases with every grant of Key.
	Fence uint64
	// Lease is the validity granted; the store keeps the key Lease+LockDelay.
	Lease     time.Duration
	LockDelay time.Duration
	// Sent is when the granting request was sent: the lease runs from then.
	Sent time.Time
}

// Token limits: AcquireToken takes tokens of MinTokenLen to MaxTokenLen
// bytes of letters, digits, '-' and '_'.
const (
	MinTokenLen = 16
	MaxTokenLen = 128
)

// AcquireToken acquires key for a holder elsewhere, a lock service's client
// for instance, which renews and releases it by token through RenewToken and
// ReleaseToken, on this client or on any other over the same store. Options,
// the policy, validation, waiting and the observer apply as for Lock, but
// it tries once unless given WithWait, and the client keeps nothing: no
// Lock, no watchdog, no loss notice. The lock ends at its lease unless
// renewed.
//
// The token is the caller's, so that a caller can make a retried
// acquisition idempotent by deriving it from a request id. A store failure
// whose outcome is unknown therefore ends the call with its error, even
// within a wait, and the token may hold the key: retry with the same token
// or release it. An attempt cut short by the end of the wait is one such
// failure: its error matches context.DeadlineExceeded, not ErrNotAcquired.
//
// Acquiring under the token that holds the key is refused with
// ErrNotAcquired or granted again, as the store has it; a repeated grant has
// the same fence and renews the hold in the store, so its lease counts from
// the repeat. RenewToken with the token succeeds if it holds the key.
func (c *Client) AcquireToken(ctx context.Context, key, token string, opts ...Option) (TokenGrant, error) {
	if err := validToken(token); err != nil {
		return TokenGrant{}, keyErr(c.acquireOp, key, err)
	}
	r, err := c.prepare(ctx, key, false, append([]Option{WithWait(0)}, opts...))
	if err != nil {
		return TokenGrant{}, err
	}
	if !c.enterAcquire() {
		return TokenGrant{}, keyErr(c.acquireOp, key, ErrClosed)
	}
	defer c.inflight.Done()
	r.keepToken = true
	req := driver.AcquireRequest{Key: key, Token: token, TTL: r.Lease + r.LockDelay, Meta: r.Meta, Intent: r.intent, Permits: r.permits, Unfollowed: true}
	var granted TokenGrant
	_, err = c.take(ctx, &r, &req, func(_ context.Context, g driver.Grant, sent time.Time) (string, error) {
		granted = TokenGrant{Key: key, Token: token, Fence: g.Fence, Lease: r.grantedLease(r.Lease, g.TTL), LockDelay: r.LockDelay, Sent: sent}
		return tokenID(token), nil
	})
	return granted, err
}

// RenewToken renews a lock granted by AcquireToken: the store keeps it for
// lease from now (a lock-delay given at the grant is not added again). It
// returns an error matching ErrNotHeld if token no longer holds key.
func (c *Client) RenewToken(ctx context.Context, key, token string, lease time.Duration) error {
	r := Request{Key: key, Lease: lease, keepToken: true}
	if err := validTokenCall(key, token); err != nil {
		return keyErr("renew", key, err)
	}
	if err := r.validateLease(lease, c.maxLease); err != nil {
		return keyErr("renew", key, err)
	}
	start := time.Now()
	err := c.backend.Renew(ctx, key, token, lease)
	c.observeCall(ctx, &r, "renew", start, err)
	e := observe.Event{Kind: observe.Renewed, TokenID: tokenID(token), Remote: true}
	if err != nil {
		e.Kind, e.Err = observe.RenewFailed, err
	}
	c.observe(ctx, &r, e)
	if err != nil {
		return keyErr("renew", key, err)
	}
	return nil
}

// ReleaseToken releases a lock granted by AcquireToken, retrying a failure
// whose reply never came within ReleaseAttempts and ReleaseBudget, like
// Lock.Release. It returns an error matching ErrNotHeld if token no longer
// held key (released already, expired, or taken by another).
func (c *Client) ReleaseToken(ctx context.Context, key, token string) error {
	r := Request{Key: key, keepToken: true}
	if err := validTokenCall(key, token); err != nil {
		return keyErr("release", key, err)
	}
	err := c.releaseOrHand(ctx, &r, token)
	e := observe.Event{Kind: observe.Released, Reason: observe.ReleaseReleased, TokenID: tokenID(token), Remote: true}
	switch {
	case err == nil:
		c.observe(ctx, &r, e)
	case errors.Is(err, ErrNotHeld):
		e.Reason = observe.ReleaseExpired
		c.observe(ctx, &r, e)
	}
	if err != nil {
		return keyErr("release", key, err)
	}
	return nil
}

// validTokenCall checks key and token of a renewal or release by token.
func validTokenCall(key, token string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return validToken(token)
}

// validToken checks a caller's token: see MinTokenLen.
func validToken(token string) error {
	if len(token) < MinTokenLen || len(token) > MaxTokenLen {
		return fmt.Errorf("%w: token of %d bytes, want %d to %d", ErrInvalidOption, len(token), MinTokenLen, MaxTokenLen)
	}
	for i := 0; i < len(token); i++ {
		switch ch := token[i]; {
		case ch >= '0' && ch <= '9', ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch == '-', ch == '_':
		default:
			return fmt.Errorf("%w: token has %q at byte %d; want letters, digits, '-' and '_'", ErrInvalidOption, ch, i)
		}
	}
	return nil
}
