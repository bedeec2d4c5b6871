package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// service implements the LockService's RPCs over its Server.
type service struct{ s *Server }

var _ distlockv1connect.LockServiceHandler = (*service)(nil)

// deadlineMargin returns how long before a deadline remaining away a wait
// gives up, so that its Aborted answer (after the wait's withdrawal from the
// store) reaches the caller before the caller stops listening: a tenth of
// the time, at least 100ms and at most a second.
func deadlineMargin(remaining time.Duration) time.Duration {
	return min(max(remaining/10, 100*time.Millisecond), time.Second)
}

// Acquire checks the whole request, then takes the key for a new token (one
// derived from the request id or the session, so that a retry finds it),
// waiting as asked but never past the call's deadline or Shutdown.
func (h *service) Acquire(ctx context.Context, req *connect.Request[distlockv1.AcquireRequest]) (res *connect.Response[distlockv1.AcquireResponse], err error) {
	s := h.s
	noteKey(ctx, short(req.Msg.GetKey()))
	a, err := s.limits.checkAcquire(req.Msg)
	if err != nil {
		return nil, err
	}
	id := callOf(ctx).id
	tenant := id.Tenant
	sk := storeKey(tenant, a.key)
	if !a.leaseGiven && s.lease != nil {
		if d := s.lease(sk); d > 0 {
			a.lease = d // the group's, which its max_lease allows
		}
	}
	labels := maps.Clone(a.labels)
	if labels == nil {
		labels = make(map[string]string, 3)
	}
	if a.requestID != "" {
		labels[labelRequest] = requestLabel(tenant, a.key, a.requestID)
	}
	var token string
	switch {
	case a.sessionID != "":
		ss, serr := s.renewSession(ctx, tenant, a.sessionID)
		if serr != nil {
			return nil, serr
		}
		nonce := sessionNonce(a.requestID)
		a.lease = ss.ttl
		labels[labelSession] = sessionHandle(a.sessionID)
		labels[labelNonce] = nonce
		token = sessionLockToken(a.sessionID, a.key, nonce)
		if ss.members {
			// A grant is answered once its member is there (see session.go);
			// failing that, the lock is released.
			defer func() {
				if err == nil {
					if err = s.keepMember(ctx, tenant, a.sessionID, a.key, nonce, ss.ttl, true); err != nil {
						res = nil
						s.abandon(ctx, sk, token)
					}
				}
			}()
		}
	case a.requestID != "":
		token = requestToken(tenant, id.Credential, a.owner, a.key, a.requestID)
	default:
		token = randomHex(tokenLen)
	}
	if limit := s.maxHold(sk); limit > 0 && a.lease > limit {
		a.lease = limit // so that the lock ends at its cap even unrenewed
	}
	labels[labelLease] = a.lease.String()

	opts := []distlock.Option{distlock.WithLease(a.lease), distlock.WithLockDelay(a.lockDelay),
		distlock.WithOwner(a.owner), distlock.WithBusinessID(a.businessID), distlock.WithMetadata(labels)}
	retry := a.requestID != "" && !a.firstTry
	if a.requestID != "" && a.sessionID == "" {
		// A wait parked for this request id (resumes) is taken up by a
		// waiting call, and ended by any other.
		if a.wait > 0 {
			w, err := s.parking.join(token, sk)
			if err != nil {
				return nil, err
			}
			if w != nil {
				return s.awaitParked(ctx, tenant, a, sk, token, w)
			}
		} else if g, stamped, ok, queued := s.parking.end(token); ok {
			return s.grantedOnce(ctx, tenant, a, sk, stamped, g)
		} else if queued {
			// The place waited behind the key's holder: the key is held,
			// and an attempt would only load the store, where a client
			// giving up thousands of waits would queue as many ahead of
			// the holder's release.
			return s.answerAcquire(ctx, tenant, a, sk, nil, distlock.TokenGrant{}, distlock.ErrNotAcquired)
		}
	}
	if retry && a.wait > 0 {
		// A retry whose first try was granted would wait for itself: try
		// once, and if the key is held see whether the token holds it,
		// before waiting. A retry that finds the key free pays nothing, and
		// a first try (first_try) does not look.
		g, stamped, err := s.acquireToken(ctx, sk, token, opts...)
		if err == nil {
			return s.grantedOnce(ctx, tenant, a, sk, stamped, g)
		}
		if errors.Is(err, distlock.ErrNotAcquired) {
			if rg, ok, err := s.regrant(ctx, a, sk, token, labels[labelRequest]); ok {
				return regranted(rg, err)
			}
		}
	}
	if a.resumes && a.requestID != "" && a.sessionID == "" && a.wait > 0 {
		done, err := s.waiters.take(tenant)
		if err != nil {
			return nil, err
		}
		w, err := s.parking.park(s.stopCtx, token, sk, func(ctx context.Context) (distlock.TokenGrant, map[string]string, error) {
			s.metrics.wait(1)
			defer s.metrics.wait(-1)
			return s.acquireToken(ctx, sk, token, append(opts, distlock.WithWait(distlock.WaitUntilContextDone))...)
		}, done)
		if err != nil {
			return nil, err
		}
		return s.awaitParked(ctx, tenant, a, sk, token, w)
	}
	wctx, cancel := s.waitContext(ctx, &a.wait)
	defer cancel()
	if a.wait > 0 {
		done, err := s.waiters.take(tenant)
		if err != nil {
			return nil, err
		}
		defer done()
		s.metrics.wait(1)
		defer s.metrics.wait(-1)
	}
	start := time.Now()
	g, stamped, err := s.acquireToken(wctx, sk, token, append(opts, distlock.WithWait(a.wait))...)
	if ambiguous(err) {
		if a.requestID == "" { // no retry can claim the token: free the key if it holds it
			s.abandon(ctx, sk, token)
		}
		err = waitEnded(wctx, err, a.wait, start)
	}
	if errors.Is(err, distlock.ErrNotAcquired) && retry { // a retry, or lost a race to a concurrent one
		if rg, ok, err := s.regrant(ctx, a, sk, token, labels[labelRequest]); ok {
			return regranted(rg, err)
		}
	}
	return s.answerAcquire(ctx, tenant, a, sk, stamped, g, err)
}

// answerAcquire answers an Acquire's outcome: the grant g with its labels,
// or err.
func (s *Server) answerAcquire(ctx context.Context, tenant string, a acquireArgs, sk string, labels map[string]string, g distlock.TokenGrant, err error) (*connect.Response[distlockv1.AcquireResponse], error) {
	if errors.Is(err, distlock.ErrNotAcquired) && !s.stopping.Load() {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("acquire %q: held by another holder (waited %v)", a.key, a.wait))
	}
	if err != nil {
		return nil, s.storeError(ctx, "acquire", a.key, sk, err)
	}
	return s.grantedOnce(ctx, tenant, a, sk, labels, g)
}

// awaitParked waits on the parked wait w for the call's wait, and answers
// its grant or its failure. A call whose wait ends first leaves w, parked
// for the call that resumes it, and is answered Aborted.
func (s *Server) awaitParked(ctx context.Context, tenant string, a acquireArgs, sk, token string, w *parkedWait) (*connect.Response[distlockv1.AcquireResponse], error) {
	wctx, cancel := s.waitContext(ctx, &a.wait)
	defer cancel()
	t := time.NewTimer(a.wait)
	defer t.Stop()
	select {
	case <-w.done:
		g, labels, err := s.parking.take(token, w)
		return s.answerAcquire(ctx, tenant, a, sk, labels, g, err)
	case <-t.C:
	case <-wctx.Done():
	}
	if err := ctx.Err(); err != nil {
		// The caller gave up the call, and with it the wait (or its link
		// broke, and its retry queues again).
		s.parking.leave(token, w, false)
		return nil, connect.NewError(connect.CodeCanceled, err)
	}
	s.parking.leave(token, w, a.resumes)
	return s.answerAcquire(ctx, tenant, a, sk, nil, distlock.TokenGrant{}, distlock.ErrNotAcquired)
}

// releaseParked frees what a parked wait for token got that no call took:
// its grant, or, if the store's answer was lost, the grant it may have
// made.
func (s *Server) releaseParked(token string, w *parkedWait) {
	if w.err == nil || ambiguous(w.err) {
		s.abandon(context.Background(), w.sk, token)
	}
}

// grantedOnce answers a grant. A grant of a request id under a hold cap may
// be a store's repeat of an earlier grant to the same token, which renews
// it: it then gets no more than what is left of the cap of its first grant,
// as a Renew would, and at the cap it ends.
func (s *Server) grantedOnce(ctx context.Context, tenant string, a acquireArgs, sk string, labels map[string]string, g distlock.TokenGrant) (*connect.Response[distlockv1.AcquireResponse], error) {
	if a.requestID == "" || s.maxHold(sk) <= 0 {
		return s.granted(tenant, a, labels, g), nil
	}
	info, err := s.store.of(sk).Inspect(ctx, sk)
	if err != nil {
		return nil, s.storeError(ctx, "acquire", a.key, sk, err)
	}
	first := labelTime(info.Meta.Labels)
	if !info.Held || info.Fence != g.Fence || first.IsZero() || !first.Before(labelTime(labels)) {
		return s.granted(tenant, a, labels, g), nil // a grant of its own
	}
	lease, err := s.capLease(sk, info, g.Lease, time.Now())
	if err != nil {
		_ = s.store.of(sk).ReleaseToken(ctx, sk, g.Token) // the repeat renewed it past its cap
		return nil, s.storeError(ctx, "acquire", a.key, sk, err)
	}
	if lease < g.Lease {
		sent := time.Now()
		if err := s.store.of(sk).RenewToken(ctx, sk, g.Token, lease); err != nil {
			return nil, s.storeError(ctx, "acquire", a.key, sk, err)
		}
		g.Lease, g.Sent = lease, sent
	}
	return acquired(g), nil
}

// granted tells this server's watchers of a grant and answers it.
func (s *Server) granted(tenant string, a acquireArgs, labels map[string]string, g distlock.TokenGrant) *connect.Response[distlockv1.AcquireResponse] {
	s.events.publish(tenant, change{typ: distlockv1.Event_TYPE_ACQUIRED, at: g.Sent, token: g.Token, info: distlock.Info{
		Key: g.Key, Held: true, Fence: g.Fence, TTL: g.Lease + g.LockDelay,
		Meta: distlock.Meta{Owner: a.owner, BusinessID: a.businessID, Labels: labels},
	}})
	return acquired(g)
}

// acquired is the response of a grant.
func acquired(g distlock.TokenGrant) *connect.Response[distlockv1.AcquireResponse] {
	lease, at := expiry(g.Lease, g.Sent)
	return connect.NewResponse(&distlockv1.AcquireResponse{Token: g.Token, Fence: g.Fence, Lease: lease, ExpiresAt: at})
}

// regranted is the answer of a regrant that found the grant of its request
// id: the grant, or err.
func regranted(g distlock.TokenGrant, err error) (*connect.Response[distlockv1.AcquireResponse], error) {
	if err != nil {
		return nil, err
	}
	return acquired(g), nil
}

// ambiguous reports whether an Acquire's error leaves its outcome unknown:
// the store may have granted the token although the reply never came.
func ambiguous(err error) bool {
	if err == nil {
		return false
	}
	for _, known := range []error{distlock.ErrNotAcquired, distlock.ErrInvalidKey, distlock.ErrInvalidOption, distlock.ErrDegraded, distlock.ErrClosed} {
		if errors.Is(err, known) {
			return false
		}
	}
	return true
}

// waitEnded returns ErrNotAcquired for err, an ambiguous failure of an
// acquisition that waited wait from start, if the wait's end cut its last
// attempt short (neither the caller nor Shutdown, which end wctx, did):
// the store says so as the context's deadline or, in-process etcd, as its
// "request timed out". It returns err otherwise.
func waitEnded(wctx context.Context, err error, wait time.Duration, start time.Time) error {
	if wait > 0 && time.Since(start) >= wait && wctx.Err() == nil {
		return distlock.ErrNotAcquired
	}
	return err
}

// abandonBudget bounds the release of a token whose grant is unknown.
const abandonBudget = 5 * time.Second

// abandon releases sk for token if the store granted it, so that a grant
// whose reply was lost does not hold the key for a whole lease.
func (s *Server) abandon(ctx context.Context, sk, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonBudget)
	defer cancel()
	_ = s.store.of(sk).ReleaseToken(ctx, sk, token) // ErrNotHeld: it was not granted
}

// regrant answers the retry of an Acquire whose request id (label
// reqLabel) holds sk, on a store that refuses a repeated grant: it renews
// the grant the retry already has, within what is left of its group's hold
// cap, as a Renew would, and answers the grant's own fence. ok is false if
// no grant of this request id holds sk, or the store cannot tell (the
// acquisition then says); with ok, err says that the cap ended the grant,
// or that another caller holds the key under this request id.
func (s *Server) regrant(ctx context.Context, a acquireArgs, sk, token, reqLabel string) (_ distlock.TokenGrant, ok bool, _ error) {
	info, err := s.store.of(sk).Inspect(ctx, sk)
	if err != nil || !info.Held || reqLabel == "" || info.Meta.Labels[labelRequest] != reqLabel {
		return distlock.TokenGrant{}, false, nil
	}
	lease, err := s.capLease(sk, info, a.lease, time.Now())
	if err != nil {
		return distlock.TokenGrant{}, true, s.storeError(ctx, "acquire", a.key, sk, err)
	}
	sent := time.Now()
	if err := s.store.of(sk).RenewToken(ctx, sk, token, lease); err != nil {
		if errors.Is(err, distlock.ErrNotHeld) && s.stillHeld(ctx, sk, info.Fence) {
			return distlock.TokenGrant{}, true, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf(
				"acquire %q: another caller (owner %q) holds the key under this request_id: a request id makes only its own caller's retry idempotent, so give each caller ids of its own",
				a.key, info.Meta.Owner))
		}
		return distlock.TokenGrant{}, false, nil
	}
	// A fence the same before and after the renewal is the grant's own:
	// fences never repeat, so no other grant could come between.
	if !s.stillHeld(ctx, sk, info.Fence) {
		return distlock.TokenGrant{}, false, nil
	}
	return distlock.TokenGrant{Key: sk, Token: token, Fence: info.Fence, Lease: lease, Sent: sent}, true, nil
}

// stillHeld reports whether the grant of sk with fence still holds it, as
// far as the store can tell.
func (s *Server) stillHeld(ctx context.Context, sk string, fence uint64) bool {
	info, err := s.store.of(sk).Inspect(ctx, sk)
	return err == nil && info.Held && info.Fence == fence
}

// waitContext returns the context of an Acquire's wait: ctx, also ended by
// Shutdown. It shortens *wait to end deadlineMargin before ctx's deadline.
func (s *Server) waitContext(ctx context.Context, wait *time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && *wait > 0 {
		remaining := time.Until(d)
		*wait = max(0, min(*wait, remaining-deadlineMargin(remaining)))
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.stopCtx, cancel)
	return wctx, func() { stop(); cancel() }
}

// Renew extends a held lock by the lease given, or by the one it was
// acquired with (kept in its labels).
func (h *service) Renew(ctx context.Context, req *connect.Request[distlockv1.RenewRequest]) (*connect.Response[distlockv1.RenewResponse], error) {
	s := h.s
	key := req.Msg.GetKey()
	noteKey(ctx, short(key))
	if err := s.limits.checkKey(key); err != nil {
		return nil, err
	}
	if req.Msg.GetToken() == "" {
		return nil, invalid("renew %q: token is required", key)
	}
	sk := storeKey(callOf(ctx).id.Tenant, key)
	lease := time.Duration(0)
	if req.Msg.GetLease() != nil {
		var err error
		if lease, err = checkDuration(key, "lease", req.Msg.GetLease(), distlock.MinLease, s.limits.MaxLease); err != nil {
			return nil, err
		}
	}
	// The lock's labels give its lease and when it was granted.
	var fence uint64 // the holder's, if read
	if lease == 0 || s.maxHold(sk) > 0 {
		info, err := s.store.of(sk).Inspect(ctx, sk)
		if err != nil {
			return nil, s.storeError(ctx, "renew", key, sk, err)
		}
		if !info.Held {
			return nil, s.storeError(ctx, "renew", key, sk, s.renewRefused(sk))
		}
		fence = info.Fence
		if lease == 0 {
			lease = leaseOf(info, s.limits.DefaultLease)
		}
		if lease, err = s.capLease(sk, info, lease, time.Now()); err != nil {
			return nil, s.storeError(ctx, "renew", key, sk, err)
		}
	}
	sent := time.Now()
	if err := s.renewToken(ctx, sk, req.Msg.GetToken(), lease); err != nil {
		return nil, s.storeError(ctx, "renew", key, sk, err)
	}
	d, at := expiry(lease, sent)
	return connect.NewResponse(&distlockv1.RenewResponse{Lease: d, ExpiresAt: at,
		ReleaseRequested: s.releaseRequested(ctx, sk, fence)}), nil
}

// leaseOf is the lease a lock was acquired with, or def if it has no
// readable lease label (a lock taken without the server).
func leaseOf(info distlock.Info, def time.Duration) time.Duration {
	d, err := time.ParseDuration(info.Meta.Labels[labelLease])
	if err != nil || d <= 0 {
		return def
	}
	return d
}

// Release frees a held lock and tells this server's watchers at once.
func (h *service) Release(ctx context.Context, req *connect.Request[distlockv1.ReleaseRequest]) (*connect.Response[distlockv1.ReleaseResponse], error) {
	s := h.s
	key := req.Msg.GetKey()
	noteKey(ctx, short(key))
	if err := s.limits.checkKey(key); err != nil {
		return nil, err
	}
	if req.Msg.GetToken() == "" {
		return nil, invalid("release %q: token is required", key)
	}
	tenant := callOf(ctx).id.Tenant
	sk := storeKey(tenant, key)
	if err := s.releaseToken(ctx, sk, req.Msg.GetToken()); err != nil {
		return nil, s.storeError(ctx, "release", key, sk, err)
	}
	s.events.publish(tenant, change{typ: distlockv1.Event_TYPE_RELEASED, at: time.Now(), token: req.Msg.GetToken(), info: distlock.Info{Key: sk}})
	return connect.NewResponse(&distlockv1.ReleaseResponse{}), nil
}

// Inspect reports the holder of a key of the caller's tenant, without its
// token; a free key is not an error (held is false).
func (h *service) Inspect(ctx context.Context, req *connect.Request[distlockv1.InspectRequest]) (*connect.Response[distlockv1.InspectResponse], error) {
	s := h.s
	key := req.Msg.GetKey()
	noteKey(ctx, short(key))
	if err := s.limits.checkKey(key); err != nil {
		return nil, err
	}
	sk := storeKey(callOf(ctx).id.Tenant, key)
	info, err := s.store.of(sk).Inspect(ctx, sk)
	if err != nil {
		return nil, s.storeError(ctx, "inspect", key, sk, err)
	}
	return connect.NewResponse(&distlockv1.InspectResponse{Lock: lockOf(key, "", info)}), nil
}
