package distlock

import (
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
)

// acquire resolves options, applies the policy, validates, and takes the
// lock; once makes a single attempt whatever the options say.
func (c *Client) acquire(ctx context.Context, key string, once bool, opts []Option) (*Lock, error) {
	r, err := c.prepare(ctx, key, once, opts)
	if err != nil {
		return nil, err
	}
	if !c.enterAcquire() {
		return nil, keyErr(c.acquireOp, key, ErrClosed)
	}
	defer c.inflight.Done()
	if r.Reentrant {
		if l := c.reenter(&r); l != nil {
			return l, nil
		}
	}
	req := driver.AcquireRequest{Key: key, Token: newToken(), TTL: r.Lease + r.LockDelay, Meta: r.Meta, Intent: r.intent, Permits: r.permits}
	var h *hold
	g, err := c.take(ctx, &r, &req, func(obsCtx context.Context, g driver.Grant, sent time.Time) (string, error) {
		var err error
		h, err = c.newHold(obsCtx, r, req.Token, g, sent)
		if err != nil {
			return "", err
		}
		return h.tokenID, nil
	})
	if err != nil {
		return nil, err
	}
	h.arm(g)
	return &Lock{h: h}, nil
}

// prepare resolves options, applies the policy and validates: the request
// of an acquisition, or the error that ends it before any store call.
func (c *Client) prepare(ctx context.Context, key string, once bool, opts []Option) (Request, error) {
	r := Request{Key: key, Wait: WaitUntilContextDone, Lease: DefaultLease, Watchdog: true, Meta: Meta{Owner: OwnerFromContext(ctx)}}
	for _, o := range opts {
		o(&r)
	}
	if once {
		r.Wait = 0
	}
	if c.policy != nil {
		if err := c.policy.Apply(ctx, &r); err != nil {
			err = keyErr(c.acquireOp, key, err)
			if c.observer != nil { // a refused acquisition still starts and ends once
				obsCtx := c.observer.AcquireStarted(ctx, c.event(&r, observe.Event{Kind: observe.AcquireStart}))
				c.observe(obsCtx, &r, observe.Event{Kind: observe.NotAcquired, Err: err})
			}
			return r, err
		}
	}
	if err := r.validate(c.maxLease); err != nil {
		return r, keyErr(c.acquireOp, key, err)
	}
	return r, nil
}

// take acquires req as r says and reports the acquisition to the observer.
// held turns a grant into the caller's result and returns the token id for
// the event; its error ends the acquisition like a store's, but for
// errLateGrant while r's wait lasts, after which take tries again with a
// fresh token.
func (c *Client) take(ctx context.Context, r *Request, req *driver.AcquireRequest,
	held func(obsCtx context.Context, g driver.Grant, sent time.Time) (tokenID string, err error)) (driver.Grant, error) {
	obsCtx, start := c.acquireStarted(ctx, r)
	g, id, err := c.takeInTime(obsCtx, r, req, start, held)
	if err != nil {
		return driver.Grant{}, c.acquireEnded(obsCtx, r, start, 0, "", err)
	}
	return g, c.acquireEnded(obsCtx, r, start, g.Fence, id, nil)
}

// acquireStarted reports the start of r's acquisition to the observer and
// returns the context its events are reported with, and when it started.
func (c *Client) acquireStarted(ctx context.Context, r *Request) (context.Context, time.Time) {
	start := time.Now()
	if c.observer == nil {
		return ctx, start
	}
	return c.observer.AcquireStarted(ctx, c.event(r, observe.Event{Kind: observe.AcquireStart, Remote: r.keepToken})), start
}

// acquireEnded reports the end of r's acquisition, begun at start: granted
// with fence to the token of id, or refused with err. It returns err named
// with the operation and key, as the caller gets it.
func (c *Client) acquireEnded(obsCtx context.Context, r *Request, start time.Time, fence uint64, id string, err error) error {
	var waited time.Duration
	if c.observer != nil {
		waited = time.Since(start)
	}
	if err != nil {
		kind := observe.NotAcquired
		if !errors.Is(err, ErrNotAcquired) {
			kind = observe.AcquireFailed
		}
		err = keyErr(c.acquireOp, r.Key, err)
		c.observe(obsCtx, r, observe.Event{Kind: kind, Wait: waited, Err: err, Remote: r.keepToken})
		return err
	}
	c.observe(obsCtx, r, observe.Event{Kind: observe.Acquired, Fence: fence, Wait: waited, TokenID: id, Remote: r.keepToken})
	return nil
}

// errLateGrant refuses a grant that came back after its validity had
// passed: the client released it.
var errLateGrant = fmt.Errorf("%w: granted after its validity had passed", ErrNotAcquired)

// takeInTime acquires req and passes the grant to held. A grant that came
// back too late (held's errLateGrant: a loaded machine, a slow link) is
// tried again after a backoff, with a fresh token, while the wait r began
// at start lasts; a caller's own token (r.keepToken) is not, as its late
// grant is being released in the background.
func (c *Client) takeInTime(ctx context.Context, r *Request, req *driver.AcquireRequest, start time.Time,
	held func(obsCtx context.Context, g driver.Grant, sent time.Time) (tokenID string, err error)) (driver.Grant, string, error) {
	wait := r.Wait
	defer func() { r.Wait = wait }()
	retry := backoff{min: 10 * time.Millisecond, max: r.Lease}
	for {
		g, sent, err := c.acquireWaiting(ctx, r, req)
		if err != nil {
			return g, "", err
		}
		id, err := held(ctx, g, sent)
		if !errors.Is(err, errLateGrant) || wait == 0 || r.keepToken {
			return g, id, err
		}
		pause := retry.next()
		if wait > 0 {
			r.Wait = wait - time.Since(start) - pause
			if r.Wait <= 0 {
				return g, id, err
			}
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return g, id, errors.Join(err, ctx.Err())
		case <-c.closeCtx.Done():
			t.Stop()
			return g, id, ErrClosed
		}
		req.Token = newToken()
	}
}

// attempt makes one acquisition request. A request that failed without a
// clear answer may have succeeded in the store, so its token is released in
// the background and req gets a fresh token for any later attempt (the
// background release must never meet a grant of the same token).
func (c *Client) attempt(ctx context.Context, r *Request, req *driver.AcquireRequest) (driver.Grant, time.Time, error) {
	sent := time.Now()
	g, err := c.backend.Acquire(ctx, *req)
	failpoint("acquire-sent", r.Key)
	c.observeCall(ctx, r, "acquire", sent, err)
	if err != nil {
		if !errors.Is(err, ErrNotAcquired) && !r.keepToken {
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

// releaseAbandoned releases, in the background, a token whose acquisition
// result is unknown. Close gives such cleanups what is left of its budget.
func (c *Client) releaseAbandoned(r *Request, token string) {
	c.goBackground(func() {
		ctx, cancel := context.WithTimeout(c.bgCtx, ReleaseBudget)
		defer cancel()
		_ = c.releaseByToken(ctx, r, token, nil)
	})
}

// freedByLease ends the error of a release given up on. A backend that is a
// lock service's client passes on its service's, which names the attempts
// the service made: the client does not say it again.
const freedByLease = "the store frees the key when its lease runs out"

// errMayHaveReleased joins ErrNotHeld from a release retried after an
// attempt that failed: the store may have done that attempt and lost only
// its reply.
var errMayHaveReleased = errors.New("an earlier attempt that failed may have released it")

// releaseByToken releases key for token, retrying failures within the bounds
// above and ctx. It never releases by bare key. failed, if not nil, is an
// earlier call's failure that may have freed the key (a handoff whose reply
// was lost). ErrNotHeld after a failed attempt comes joined with
// errMayHaveReleased.
func (c *Client) releaseByToken(ctx context.Context, r *Request, token string, failed error) error {
	var (
		bo     = backoff{min: 5 * time.Millisecond, max: 200 * time.Millisecond}
		first  = time.Now() // the budget counts from the first attempt
		cancel context.CancelFunc
	)
	for attempt := 1; ; attempt++ {
		start := first
		if attempt > 1 {
			start = time.Now()
		}
		err := c.backend.Release(ctx, r.Key, token)
		c.observeCall(ctx, r, "release", start, err)
		if err == nil || errors.Is(err, ErrNotHeld) {
			if err != nil && failed != nil {
				return fmt.Errorf("%w: %w (%v)", err, errMayHaveReleased, failed)
			}
			return err
		}
		failed = err
		if attempt == 1 { // a timer only once a retry may be needed
			ctx, cancel = context.WithDeadline(ctx, first.Add(ReleaseBudget))
			defer cancel()
		}
		if permanent(err) || attempt == ReleaseAttempts || ctx.Err() != nil {
			if strings.Contains(err.Error(), freedByLease) {
				return err // a lock service's own client gave up, and said so
			}
			tries := "1 attempt"
			if attempt > 1 {
				tries = fmt.Sprintf("%d attempts", attempt)
			}
			return fmt.Errorf("%w (gave up after %s over %v; %s)", err, tries, time.Since(first).Round(time.Millisecond), freedByLease)
		}
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// permanent reports whether a store error will not go away by retrying.
func permanent(err error) bool {
	return errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidKey) || errors.Is(err, ErrInvalidOption) ||
		errors.Is(err, ErrNoSchema) || errors.Is(err, errors.ErrUnsupported) || errors.Is(err, context.Canceled)
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

// event fills the request's labels into e.
func (c *Client) event(r *Request, e observe.Event) observe.Event {
	e.Key, e.Group, e.Critical, e.Backend = r.Key, r.Group, r.Critical, c.backendName
	e.Owner, e.BusinessID = r.Meta.Owner, r.Meta.BusinessID
	return e
}

func (c *Client) observe(ctx context.Context, r *Request, e observe.Event) {
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

// next returns the next delay, between min/2 and the current ceiling. It is
// defined for every min and max, even a max under min.
func (b *backoff) next() time.Duration {
	ceil := b.min << min(b.n, 16)
	if ceil > b.max || ceil <= 0 {
		ceil = b.max
	}
	ceil = max(ceil, b.min, 0)
	b.n++
	return b.min/2 + rand.N(ceil-b.min/2+1)
}
