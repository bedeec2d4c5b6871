package remotelock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// Acquire makes one attempt to take req.Key, without a wait. req.Token is
// sent as the request id, so a repeated attempt with the same token gets
// the same lock while it is held. An attempt whose reply never came is
// remembered, so that a Release of its token (which the core makes for
// such an attempt) frees what it may have taken.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.acquireOnce(ctx, b.locks, req)
}

// acquireOnce is Acquire for a hold of kind k.
func (b *Backend) acquireOnce(ctx context.Context, k calls, req driver.AcquireRequest) (driver.Grant, error) {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return driver.Grant{}, err
	}
	defer c.end()
	sent := time.Now()
	resp, err := k.acquire(c.ctx, req, 0, b.firstTry(k.id(req)), false)
	if err != nil {
		if !definite(err) {
			b.keepUnknown(k, req, sent)
		}
		return driver.Grant{}, b.fail(c, err)
	}
	g := b.keep(k, req, resp, sent)
	g.TTL = given(req.TTL, resp.GetLease())
	return g, nil
}

// given is the time to live the service answered when it is less than
// asked (a policy's hold cap cut it), else 0: the core counts the lock's
// validity with the lease the service gave, never the one asked.
func given(asked time.Duration, answered *durationpb.Duration) time.Duration {
	if d := answered.AsDuration(); answered != nil && d < asked {
		return max(d, time.Nanosecond)
	}
	return 0
}

// AcquireWait takes req.Key, waiting in the service until it is granted,
// ctx ends or Close is called. Each call to the service asks for the wait
// left before ctx's deadline, at most the backend's max wait (WithMaxWait),
// and a wait without a deadline is made of such calls one after another.
// A refusal for the tenant's rate (RESOURCE_EXHAUSTED) does not end the
// wait: the backend asks again after a capped, jittered backoff.
// A call that ctx or Close cut short may have been granted as it ended: the
// backend then repeats the request without a wait and releases what it
// returns before it returns an error matching driver.ErrNotAcquired (joined
// with ctx.Err()) or driver.ErrClosed.
//
// A grant that came after a long wait is confirmed by a renewal at once, so
// that Grant.Sent, from which the lock's validity counts, is no earlier
// than the service's grant.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	return b.acquireWait(ctx, b.locks, req)
}

// acquireWait is AcquireWait for a hold of kind k.
func (b *Backend) acquireWait(ctx context.Context, k calls, req driver.AcquireRequest) (driver.Grant, error) {
	c, err := b.begin(ctx, 0) // each call has its own bound
	if err != nil {
		return driver.Grant{}, err
	}
	defer c.end()
	notAcquired := func() error {
		if c.closedByClose() {
			return fmt.Errorf("%w: the wait was ended by Close", driver.ErrClosed)
		}
		return errors.Join(driver.ErrNotAcquired, ctx.Err())
	}
	if g, done, err := b.tryWhileBusy(c, k, req); done {
		return g, err
	}
	bo := backoff{min: 5 * time.Millisecond, max: 500 * time.Millisecond}
	limited := backoff{min: 50 * time.Millisecond, max: 2 * time.Second}
	parked := false // the last call asked the service to keep the wait's place
	for {
		// A wait longer than one call is made of several, each of which
		// tells the service it will be resumed, so that the wait keeps its
		// place in the key's queue from one call to the next.
		wait, resumes := b.maxWait, true
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			wait, resumes = time.Until(dl), false
		}
		if wait <= 0 || driver.Ended(c.ctx) {
			if parked { // end the place the service keeps, and any grant made in it
				_ = b.abandon(context.Background(), k, req)
			}
			return driver.Grant{}, notAcquired()
		}
		// Each call gets its own bound: the wait plus one request's time.
		cctx, cancel := context.WithTimeout(c.ctx, wait+b.requestTimeout)
		sent := time.Now()
		resp, err := k.acquire(cctx, req, wait, b.firstTry(k.id(req)), resumes)
		cancel()
		parked = resumes
		if err == nil {
			g, again, err := b.grantedAfterWait(c, k, req, resp, sent)
			if !again {
				return g, err
			}
			continue
		}
		switch {
		case connect.CodeOf(err) == connect.CodeAborted:
			if c.ctx.Err() != nil {
				return driver.Grant{}, notAcquired()
			}
			// The service waited as asked; one that answers sooner is not
			// waiting, and is not asked again at once.
			if took := time.Since(sent); took < wait/2 {
				if !sleep(c.ctx, bo.next()) {
					return driver.Grant{}, notAcquired()
				}
			}
		case connect.CodeOf(err) == connect.CodeResourceExhausted:
			// The tenant is over its rate: the wait goes on, more slowly.
			if !sleep(c.ctx, limited.next()) {
				return driver.Grant{}, errors.Join(notAcquired(), b.fail(c, err))
			}
		case definite(err):
			return driver.Grant{}, b.fail(c, err)
		case cutByWaitEnd(c.ctx, err, sent.Add(wait+b.requestTimeout)):
			// Cut short by ctx or Close: the grant may have come as it ended.
			_ = b.abandon(context.Background(), k, req)
			return driver.Grant{}, notAcquired()
		default:
			// No answer, or a store failure: the core releases the token.
			b.keepUnknown(k, req, sent)
			return driver.Grant{}, b.fail(c, err)
		}
	}
}

// tryWhileBusy tries a lock's key once without a wait when the backend's
// short calls are being batched: the try joins a batch, and a free key is
// then granted for a share of a request, where a wait is a request of its
// own. A held key costs the try, and the wait goes on (done false); so does
// a refusal for the tenant's rate, which the wait's loop handles. A key that
// a try found held within the last second is not tried (contendedKeys).
func (b *Backend) tryWhileBusy(c *call, k calls, req driver.AcquireRequest) (g driver.Grant, done bool, err error) {
	l, ok := k.(lockCalls)
	if !ok || !l.busy() || b.contended.recent(req.Key, time.Now()) {
		return driver.Grant{}, false, nil
	}
	ctx, cancel := context.WithTimeout(c.ctx, b.requestTimeout)
	defer cancel()
	sent := time.Now()
	resp, err := k.acquire(ctx, req, 0, b.firstTry(k.id(req)), false)
	switch code := connect.CodeOf(err); {
	case err == nil:
		g = b.keep(k, req, resp, sent)
		g.Sent, g.TTL = sent, given(req.TTL, resp.GetLease())
		return g, true, nil
	case code == connect.CodeAborted:
		b.contended.mark(req.Key, time.Now())
		return driver.Grant{}, false, nil
	case code == connect.CodeResourceExhausted:
		return driver.Grant{}, false, nil
	case !definite(err) && cutByWaitEnd(c.ctx, err, sent.Add(b.requestTimeout)):
		// Cut short by the wait's end (or Close), which the wait's loop
		// reports: the try may have been granted as it ended.
		_ = b.abandon(context.Background(), k, req)
		return driver.Grant{}, false, nil
	case !definite(err):
		// No answer: the core releases the token, as after a wait's call.
		b.keepUnknown(k, req, sent)
	}
	return driver.Grant{}, true, b.fail(c, err)
}

// cutByWaitEnd reports whether err, the failure of a call of the wait whose
// context is wctx, is the wait's end: wctx has ended, or the call carried
// wctx's deadline (sooner than its own bound) and ended with it, here or in
// the service, which answers DeadlineExceeded at the deadline a call
// carries, a moment before wctx's timer may end it here.
func cutByWaitEnd(wctx context.Context, err error, bound time.Time) bool {
	if driver.Ended(wctx) {
		return true
	}
	dl, ok := wctx.Deadline()
	return ok && dl.Before(bound) && connect.CodeOf(err) == connect.CodeDeadlineExceeded
}

// confirmAfter is the share of the TTL a grant's reply may take before the
// grant is confirmed by a renewal: past it, counting the validity from the
// request's sending would waste too much of it.
const confirmAfter = 10

// grantedAfterWait keeps a grant that resp returned for a request sent at
// sent. If the reply took long, the grant may have been made long after
// sent: a renewal then confirms it, and Grant.Sent is when that was sent.
// again says that the lock was gone by then, so the wait should go on.
func (b *Backend) grantedAfterWait(c *call, k calls, req driver.AcquireRequest, resp *distlockv1.AcquireResponse, sent time.Time) (g driver.Grant, again bool, err error) {
	g = b.keep(k, req, resp, sent)
	g.Sent, g.TTL = sent, given(req.TTL, resp.GetLease())
	ttl := req.TTL
	if g.TTL > 0 {
		ttl = g.TTL
	}
	if time.Since(sent) <= ttl/confirmAfter {
		return g, false, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), b.requestTimeout)
	defer cancel()
	renewSent := time.Now()
	rr, rerr := k.renew(ctx, req.Key, resp.GetToken(), req.TTL)
	switch {
	case rerr == nil:
		g.Sent, g.TTL = renewSent, given(req.TTL, rr.GetLease())
		b.confirmed(k.id(req), renewSent, req.TTL)
	case connect.CodeOf(rerr) == connect.CodeNotFound:
		b.drop(k.id(req), true)
		if c.ctx.Err() == nil {
			return driver.Grant{}, true, nil
		}
		return driver.Grant{}, false, errors.Join(fmt.Errorf("%w: the grant expired on its way", driver.ErrNotAcquired), c.ctx.Err())
	}
	// Any other failure leaves the validity counted from the request's
	// sending: short, perhaps spent, but never longer than the store's.
	return g, false, nil
}

// acquireMsg is the service's request for req with a wait. firstTry says
// that no earlier call for req can have been granted (first_try).
func acquireMsg(req driver.AcquireRequest, wait time.Duration, firstTry bool) *distlockv1.AcquireRequest {
	m := &distlockv1.AcquireRequest{
		Key:        req.Key,
		Lease:      durationpb.New(req.TTL), // the core's TTL has any lock-delay in it
		Owner:      req.Meta.Owner,
		BusinessId: req.Meta.BusinessID,
		Labels:     req.Meta.Labels,
		RequestId:  req.Token,
		FirstTry:   firstTry,
	}
	if wait > 0 {
		m.Wait = durationpb.New(wait)
	}
	return m
}

// abandon frees what an acquisition of req (of kind k) whose reply never
// came may have taken: it repeats the request without a wait, which
// returns the same hold if the first one was granted (or takes a free
// one), and releases the hold it gets. It returns nil if it released one,
// an error matching driver.ErrNotHeld if none was free, or the failure.
func (b *Backend) abandon(ctx context.Context, k calls, req driver.AcquireRequest) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.requestTimeout)
	defer cancel()
	resp, err := k.acquire(ctx, req, 0, false, false)
	if err != nil {
		if connect.CodeOf(err) == connect.CodeAborted {
			return driver.ErrNotHeld
		}
		return b.fail(nil, err)
	}
	err = throughRate(ctx, func() error { return k.release(ctx, req.Key, resp.GetToken()) })
	if err != nil && connect.CodeOf(err) != connect.CodeNotFound {
		return b.fail(nil, err)
	}
	return nil
}

// Renew resets key's TTL to ttl if token, an acquisition of this backend,
// still holds it: see RenewTTL.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	_, err := b.RenewTTL(ctx, key, token, ttl)
	return err
}

// RenewTTL resets key's TTL to ttl if token, an acquisition of this backend,
// still holds it, and returns the lease the service gave: ttl, or less when
// a policy's hold cap cut it (driver.TTLRenewer). Renew and Release go on
// through the tenant's rate limit within the request timeout (see
// throughRate). A token this backend did not acquire gets an error matching
// driver.ErrNotHeld without a call; so does one the service no longer
// knows, whose grant's Lost context then ends.
func (b *Backend) RenewTTL(ctx context.Context, key, token string, ttl time.Duration) (time.Duration, error) {
	return b.renewHold(ctx, b.locks, key, lockID{key, token}, ttl)
}

// renewHold is RenewTTL for the hold id of key, of kind k.
func (b *Backend) renewHold(ctx context.Context, k calls, key string, id lockID, ttl time.Duration) (time.Duration, error) {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return 0, err
	}
	defer c.end()
	server, ok := b.serverToken(id)
	if !ok {
		return 0, driver.ErrNotHeld
	}
	var (
		sent time.Time
		resp *distlockv1.RenewResponse
	)
	err = throughRate(c.ctx, func() error {
		sent = time.Now()
		var err error
		resp, err = k.renew(c.ctx, key, server, ttl)
		return err
	})
	if err != nil {
		if connect.CodeOf(err) == connect.CodeNotFound {
			b.drop(id, true)
		}
		return 0, b.fail(c, err)
	}
	if g := given(ttl, resp.GetLease()); g > 0 {
		ttl = g
	}
	b.confirmed(id, sent, ttl)
	if reason := resp.GetReleaseRequested(); reason != "" {
		b.asked(id, reason)
	}
	return ttl, nil
}

// Release frees key if token, an acquisition of this backend, holds it. A
// token this backend did not acquire gets an error matching
// driver.ErrNotHeld without a call, unless its acquisition's reply never
// came: then Release frees what it may have taken (see AcquireWait).
func (b *Backend) Release(ctx context.Context, key, token string) error {
	return b.releaseHold(ctx, key, lockID{key, token})
}

// releaseHold is Release for the hold id of key, of the kind it was
// acquired as.
func (b *Backend) releaseHold(ctx context.Context, key string, id lockID) error {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return err
	}
	defer c.end()
	b.mu.Lock()
	h := b.held[id]
	if h != nil {
		h.releasing = true
	}
	b.mu.Unlock()
	switch {
	case h == nil:
		return driver.ErrNotHeld
	case h.server == "":
		err := b.abandon(c.ctx, h.calls, h.req)
		if err == nil || errors.Is(err, driver.ErrNotHeld) {
			b.drop(id, false)
		}
		return err
	}
	err = throughRate(c.ctx, func() error { return h.calls.release(c.ctx, key, h.server) })
	if err == nil || connect.CodeOf(err) == connect.CodeNotFound {
		b.drop(id, false)
	} else {
		b.mu.Lock()
		h.releasing = false
		b.mu.Unlock()
	}
	if err != nil {
		return b.fail(c, err)
	}
	return nil
}

// Inspect reports key's state as the service sees it.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return driver.Info{}, err
	}
	defer c.end()
	resp, err := b.rpc.Inspect(c.ctx, connect.NewRequest(&distlockv1.InspectRequest{Key: key}))
	if err != nil {
		return driver.Info{}, b.fail(c, err)
	}
	info := toInfo(resp.Msg.GetLock())
	info.Key = key
	return info, nil
}

// maxListPages bounds List: a service that kept returning pages would
// otherwise keep it going for ever.
const maxListPages = 100_000

// List returns the held locks of the caller's tenant whose keys start with
// prefix, in key order, asking the service for one page after another.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	var (
		out  []driver.Info
		page string
	)
	for range maxListPages {
		c, err := b.begin(ctx, b.requestTimeout)
		if err != nil {
			return nil, err
		}
		resp, err := b.rpc.List(c.ctx, connect.NewRequest(&distlockv1.ListRequest{Prefix: prefix, PageToken: page}))
		if err != nil {
			err = b.fail(c, err)
			c.end()
			return nil, err
		}
		c.end()
		for _, l := range resp.Msg.GetLocks() {
			out = append(out, toInfo(l))
		}
		next := resp.Msg.GetNextPageToken()
		if next == "" {
			return out, nil
		}
		if next == page {
			return nil, errors.New("remotelock: the service returned the same page token twice")
		}
		page = next
	}
	return nil, fmt.Errorf("remotelock: more than %d pages", maxListPages)
}

// ForceRelease frees key whoever holds it (an admin token is needed) and
// returns the hold it ended, or an error matching driver.ErrNotHeld if the
// key was free. The service records opts.Reason (the reason
// distlock.Client.ForceRelease was given), or DefaultReason if it is empty.
func (b *Backend) ForceRelease(ctx context.Context, key string, opts driver.ForceOptions) (driver.Info, error) {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return driver.Info{}, err
	}
	defer c.end()
	resp, err := b.rpc.ForceRelease(c.ctx, connect.NewRequest(&distlockv1.ForceReleaseRequest{Key: key, Reason: reasonOf(opts)}))
	if err != nil {
		return driver.Info{}, b.fail(c, err)
	}
	l := resp.Msg.GetLock()
	if !l.GetHeld() {
		return driver.Info{}, driver.ErrNotHeld
	}
	info := toInfo(l)
	info.Key = key
	return info, nil
}

// RequestRelease asks the holder of key to release it, through the
// service, which tells a holder that follows its Watch stream
// (WithLossWatch) at once and any holder at its next renewal through it.
// It returns the hold that was asked, or an error matching
// driver.ErrNotHeld if the key was free.
func (b *Backend) RequestRelease(ctx context.Context, key, reason string) (driver.Info, error) {
	c, err := b.begin(ctx, b.requestTimeout)
	if err != nil {
		return driver.Info{}, err
	}
	defer c.end()
	resp, err := b.rpc.RequestRelease(c.ctx, connect.NewRequest(&distlockv1.RequestReleaseRequest{Key: key, Reason: reason}))
	if err != nil {
		return driver.Info{}, b.fail(c, err)
	}
	l := resp.Msg.GetLock()
	if !l.GetHeld() {
		return driver.Info{}, driver.ErrNotHeld
	}
	info := toInfo(l)
	info.Key = key
	return info, nil
}

// toInfo converts the service's view of a lock.
func toInfo(l *distlockv1.Lock) driver.Info {
	if l == nil {
		return driver.Info{}
	}
	info := driver.Info{
		Key:     l.GetKey(),
		Held:    l.GetHeld(),
		Fence:   l.GetFence(),
		Meta:    driver.Meta{Owner: l.GetOwner(), BusinessID: l.GetBusinessId(), Labels: l.GetLabels()},
		Permits: int(l.GetPermits()),
	}
	if d := l.GetTtl(); d != nil {
		info.TTL = d.AsDuration()
	}
	if len(info.Meta.Labels) == 0 {
		info.Meta.Labels = nil
	}
	return info
}

// DefaultReason is the reason a forced release is recorded with when it is
// given none: a direct call of the backend's ForceRelease with an empty
// driver.ForceOptions.Reason (distlock.Client.ForceRelease requires one).
const DefaultReason = "forced through the Go client (remotelock) without a reason"

// reasonOf is the reason the service records for opts.
func reasonOf(opts driver.ForceOptions) string {
	if opts.Reason != "" {
		return opts.Reason
	}
	return DefaultReason
}

// backoff yields capped, jittered exponential delays.
type backoff struct {
	min, max time.Duration
	n        int
}

// next returns the next delay, between half the current ceiling and the
// ceiling.
func (b *backoff) next() time.Duration {
	ceil := min(b.min<<min(b.n, 16), b.max)
	b.n++
	return ceil/2 + rand.N(ceil/2+1)
}

// throughRate makes call, and again after a capped, jittered backoff while
// the service refuses it for the tenant's rate (RESOURCE_EXHAUSTED), until
// ctx ends: a renewal or a release that the rate limit turned away would
// leave a lock to end at its lease, or to stay held for it.
func throughRate(ctx context.Context, call func() error) error {
	bo := backoff{min: 20 * time.Millisecond, max: time.Second}
	for {
		err := call()
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !sleep(ctx, bo.next()) {
			return err
		}
	}
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
