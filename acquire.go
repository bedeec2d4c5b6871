package distlock

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/distlock/distlock/driver"
)

// acquire resolves options, applies the policy, validates, and takes the lock.
func (c *Client) acquire(ctx context.Context, key string, wait time.Duration, opts []Option) (*Lock, error) {
	r := Request{Key: key, Wait: wait, Lease: DefaultLease, Watchdog: true, Meta: Meta{Owner: OwnerFromContext(ctx)}}
	for _, o := range opts {
		o(&r)
	}
	if c.policy != nil {
		if err := c.policy.Apply(ctx, &r); err != nil {
			err = fmt.Errorf("distlock: lock %q: %w", key, err)
			if c.observer != nil { // a refused acquisition still starts and ends once
				obsCtx := c.observer.AcquireStarted(ctx, c.event(&r, Event{Kind: EventAcquireStart}))
				c.observe(obsCtx, &r, Event{Kind: EventNotAcquired, Err: err})
			}
			return nil, err
		}
	}
	if err := r.validate(c.maxLease); err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, fmt.Errorf("distlock: lock %q: %w", key, ErrClosed)
	}
	if r.Reentrant {
		if l := c.reenter(&r); l != nil {
			return l, nil
		}
	}

	obsCtx := ctx
	var start time.Time // read the clock only for an observer
	if c.observer != nil {
		start = time.Now()
		obsCtx = c.observer.AcquireStarted(ctx, c.event(&r, Event{Kind: EventAcquireStart}))
	}
	req := driver.AcquireRequest{Key: key, Token: newToken(), TTL: r.Lease + r.LockDelay, Meta: r.Meta}
	g, sent, err := c.acquireWaiting(obsCtx, &r, &req)
	var waited time.Duration
	if c.observer != nil {
		waited = time.Since(start)
	}
	var h *hold
	if err == nil {
		h, err = c.newHold(obsCtx, r, req.Token, g, sent)
	}
	if err != nil {
		kind := EventNotAcquired
		if !errors.Is(err, ErrNotAcquired) {
			kind = EventAcquireFailed
			if !errors.Is(err, ErrClosed) {
				err = fmt.Errorf("distlock: lock %q: %w", key, err)
			}
		}
		c.observe(obsCtx, &r, Event{Kind: kind, Wait: waited, Err: err})
		return nil, err
	}
	c.observe(obsCtx, &r, Event{Kind: EventAcquired, Fence: g.Fence, Wait: waited, TokenID: h.tokenID})
	return &Lock{h: h}, nil
}

// attempt makes one acquisition request. A request that failed without a
// clear answer may have succeeded in the store, so its token is released in
// the background and req gets a fresh token for any later attempt (the
// background release must never meet a grant of the same token).
func (c *Client) attempt(ctx context.Context, r *Request, req *driver.AcquireRequest) (driver.Grant, time.Time, error) {
	sent := time.Now()
	g, err := c.backend.Acquire(ctx, *req)
	c.observeCall(ctx, r, "acquire", sent, err)
	if err != nil {
		if !errors.Is(err, ErrNotAcquired) {
			c.releaseAbandoned(r, req.Token)
			req.Token = newToken()
		}
		return driver.Grant{}, sent, err
	}
	if !g.Sent.IsZero() {
		sent = g.Sent
	}
	return g, sent, nil
}

// releaseAbandoned releases a token whose acquisition result is unknown.
func (c *Client) releaseAbandoned(r *Request, token string) {
	c.goBackground(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = c.releaseByToken(ctx, r, token)
	})
}

// releaseByToken releases key for token, retrying failures whose reply never
// came until ctx ends. It never releases by bare key.
func (c *Client) releaseByToken(ctx context.Context, r *Request, token string) error {
	bo := backoff{min: 5 * time.Millisecond, max: 200 * time.Millisecond}
	for {
		var start time.Time
		if c.observer != nil {
			start = time.Now()
		}
		err := c.backend.Release(ctx, r.Key, token)
		c.observeCall(ctx, r, "release", start, err)
		if err == nil || errors.Is(err, ErrNotHeld) {
			return err
		}
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// reenter returns a new handle on a lock the owner already holds, or nil.
func (c *Client) reenter(r *Request) *Lock {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.reentrant[ownedKey{r.Key, r.Meta.Owner}]
	if h == nil || !h.addRef() {
		return nil
	}
	return &Lock{h: h}
}

func (c *Client) isClosed() bool { return c.closing.Load() }

// event fills the request's labels into e.
func (c *Client) event(r *Request, e Event) Event {
	e.Key, e.Group, e.Critical, e.Backend = r.Key, r.Group, r.Critical, c.backendName
	e.Owner, e.BusinessID = r.Meta.Owner, r.Meta.BusinessID
	return e
}

func (c *Client) observe(ctx context.Context, r *Request, e Event) {
	if c.observer != nil {
		c.observer.Observe(ctx, c.event(r, e))
	}
}

// newToken returns 128 random bits, hex-encoded.
func newToken() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// tokenID is a short hash of a token, safe to log.
func tokenID(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:4])
}

// backoff yields capped, fully jittered exponential delays.
type backoff struct {
	min, max time.Duration
	n        int
}

func (b *backoff) next() time.Duration {
	ceil := b.min << min(b.n, 16)
	if ceil > b.max || ceil <= 0 {
		ceil = b.max
	}
	b.n++
	return b.min/2 + rand.N(ceil-b.min/2+1)
}
