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

// deadlineMargin is how long before the call's deadline a wait gives up, so
// that its Aborted answer reaches the caller before the caller stops
// listening.
const deadlineMargin = 50 * time.Millisecond

// Acquire checks the whole request, then takes the key for a new token (one
// derived from the request id or the session, so that a retry finds it),
// waiting as asked but never past the call's deadline or Shutdown.
func (h *service) Acquire(ctx context.Context, req *connect.Request[distlockv1.AcquireRequest]) (*connect.Response[distlockv1.AcquireResponse], error) {
	s := h.s
	noteKey(ctx, short(req.Msg.GetKey()))
	a, err := s.limits.checkAcquire(req.Msg)
	if err != nil {
		return nil, err
	}
	tenant := callOf(ctx).id.Tenant
	sk := storeKey(tenant, a.key)
	labels := maps.Clone(a.labels)
	if labels == nil {
		labels = make(map[string]string, 3)
	}
	var token string
	switch {
	case a.sessionID != "":
		ttl, _, err := s.renewSession(ctx, tenant, a.sessionID)
		if err != nil {
			return nil, err
		}
		nonce := sessionNonce(a.requestID)
		a.lease = ttl
		labels[labelSession] = sessionHandle(a.sessionID)
		labels[labelNonce] = nonce
		token = sessionLockToken(a.sessionID, a.key, nonce)
	case a.requestID != "":
		token = requestToken(tenant, a.key, a.requestID)
	default:
		token = randomHex(tokenLen)
	}
	if limit := s.maxHold(sk); limit > 0 && a.lease > limit {
		a.lease = limit // so that the lock ends at its cap even unrenewed
	}
	labels[labelLease] = a.lease.String()

	opts := []distlock.Option{distlock.WithLease(a.lease), distlock.WithLockDelay(a.lockDelay),
		distlock.WithOwner(a.owner), distlock.WithBusinessID(a.businessID), distlock.WithMetadata(labels)}
	if a.requestID != "" && a.wait > 0 {
		// A retry whose first try was granted would wait for itself: try
		// once, and if the key is held see whether the token holds it,
		// before waiting. A first try that finds the key free pays nothing.
		g, stamped, err := s.acquireToken(ctx, sk, token, opts...)
		if err == nil {
			return s.granted(tenant, a, stamped, g), nil
		}
		if errors.Is(err, distlock.ErrNotAcquired) {
			if rg, ok := s.regrant(ctx, sk, token, a.lease); ok {
				return acquired(rg), nil
			}
		}
	}
	wctx, cancel := s.waitContext(ctx, &a.wait)
	defer cancel()
	if a.wait > 0 {
		s.metrics.wait(1)
		defer s.metrics.wait(-1)
	}
	start := time.Now()
	g, stamped, err := s.acquireToken(wctx, sk, token, append(opts, distlock.WithWait(a.wait))...)
	if ambiguous(err) {
		if a.requestID == "" { // no retry can claim the token: free the key if it holds it
			s.abandon(ctx, sk, token)
		}
		if a.wait > 0 && time.Since(start) >= a.wait && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = distlock.ErrNotAcquired // the wait's end cut the last attempt short
		}
	}
	if errors.Is(err, distlock.ErrNotAcquired) && a.requestID != "" { // lost a race to a concurrent retry
		if rg, ok := s.regrant(ctx, sk, token, a.lease); ok {
			return acquired(rg), nil
		}
	}
	if errors.Is(err, distlock.ErrNotAcquired) && !s.stopping.Load() {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("acquire %q: held by another holder (waited %v)", a.key, a.wait))
	}
	if err != nil {
		return nil, s.storeError(ctx, "acquire", a.key, sk, err)
	}
	return s.granted(tenant, a, stamped, g), nil
}

// granted tells this server's watchers of a grant and answers it.
func (s *Server) granted(tenant string, a acquireArgs, labels map[string]string, g distlock.Grant) *connect.Response[distlockv1.AcquireResponse] {
	s.events.publish(tenant, change{typ: distlockv1.Event_TYPE_ACQUIRED, at: g.Sent, info: distlock.Info{
		Key: g.Key, Held: true, Fence: g.Fence, TTL: g.Lease + g.LockDelay,
		Meta: distlock.Meta{Owner: a.owner, BusinessID: a.businessID, Labels: labels},
	}})
	return acquired(g)
}

// acquired is the response of a grant.
func acquired(g distlock.Grant) *connect.Response[distlockv1.AcquireResponse] {
	lease, at := expiry(g.Lease, g.Sent)
	return connect.NewResponse(&distlockv1.AcquireResponse{Token: g.Token, Fence: g.Fence, Lease: lease, ExpiresAt: at})
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

// abandonBudget bounds the release of a token whose grant is unknown.
const abandonBudget = 5 * time.Second

// abandon releases sk for token if the store granted it, so that a grant
// whose reply was lost does not hold the key for a whole lease.
func (s *Server) abandon(ctx context.Context, sk, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonBudget)
	defer cancel()
	_ = s.client.ReleaseToken(ctx, sk, token) // ErrNotHeld: it was not granted
}

// regrant renews sk for token if token holds it: an idempotent Acquire's
// retry, which gets the grant it already has. It reports false if token
// does not hold sk, or if the store cannot tell (the acquisition then says).
func (s *Server) regrant(ctx context.Context, sk, token string, lease time.Duration) (distlock.Grant, bool) {
	sent := time.Now()
	if err := s.client.RenewToken(ctx, sk, token, lease); err != nil {
		return distlock.Grant{}, false
	}
	info, err := s.client.Inspect(ctx, sk)
	if err != nil || !info.Held {
		return distlock.Grant{}, false
	}
	return distlock.Grant{Key: sk, Token: token, Fence: info.Fence, Lease: lease, Sent: sent}, true
}

// waitContext returns the context of an Acquire's wait: ctx, also ended by
// Shutdown. It shortens *wait to end deadlineMargin before ctx's deadline.
func (s *Server) waitContext(ctx context.Context, wait *time.Duration) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && *wait > 0 {
		*wait = max(0, min(*wait, time.Until(d)-deadlineMargin))
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
	if lease == 0 || s.maxHold(sk) > 0 {
		info, err := s.client.Inspect(ctx, sk)
		if err != nil {
			return nil, s.storeError(ctx, "renew", key, sk, err)
		}
		if !info.Held {
			return nil, s.storeError(ctx, "renew", key, sk, s.renewRefused(sk))
		}
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
	return connect.NewResponse(&distlockv1.RenewResponse{Lease: d, ExpiresAt: at}), nil
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
	s.events.publish(tenant, change{typ: distlockv1.Event_TYPE_RELEASED, at: time.Now(), info: distlock.Info{Key: sk}})
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
	info, err := s.client.Inspect(ctx, sk)
	if err != nil {
		return nil, s.storeError(ctx, "inspect", key, sk, err)
	}
	return connect.NewResponse(&distlockv1.InspectResponse{Lock: lockOf(key, "", info)}), nil
}
