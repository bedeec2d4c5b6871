package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// labelPermit names a permit among its semaphore's: a digest of its token,
// which InspectPermits shows (tokens it never shows), so that a retry and a
// renewal find their own permit's fence and grant time.
const labelPermit = "distlock.permit"

// permitDigest is the labelPermit of the permit of token.
func permitDigest(token string) string { return digest(nonceLen, "distlock-permit", token) }

// AcquirePermit takes a permit of a tenant's semaphore for a new token (one
// derived from the request id, so that a retry finds it), waiting as asked
// but never past the call's deadline or Shutdown. The lease, its group's
// lease and hold cap, the labels and the waiter cap are a lock's.
func (h *service) AcquirePermit(ctx context.Context, req *connect.Request[distlockv1.AcquirePermitRequest]) (*connect.Response[distlockv1.AcquirePermitResponse], error) {
	s, m := h.s, req.Msg
	noteKey(ctx, short(m.GetName()))
	a, err := s.limits.checkAcquire(&distlockv1.AcquireRequest{Key: m.GetName(), Wait: m.GetWait(), Lease: m.GetLease(),
		Owner: m.GetOwner(), BusinessId: m.GetBusinessId(), Labels: m.GetLabels(), RequestId: m.GetRequestId(), FirstTry: m.GetFirstTry()})
	if err != nil {
		return nil, err
	}
	if m.GetPermits() < 1 {
		return nil, invalid("semaphore %q: permits is %d: want at least 1", a.key, m.GetPermits())
	}
	id := callOf(ctx).id
	sk := storeKey(id.Tenant, a.key)
	if !a.leaseGiven && s.lease != nil {
		if d := s.lease(sk); d > 0 {
			a.lease = d
		}
	}
	if limit := s.maxHold(sk); limit > 0 && a.lease > limit {
		a.lease = limit
	}
	token := randomHex(tokenLen)
	labels := maps.Clone(a.labels)
	if labels == nil {
		labels = make(map[string]string, 4)
	}
	if a.requestID != "" {
		token = requestToken(id.Tenant, id.Credential, a.owner, a.key, a.requestID)
		labels[labelRequest] = requestLabel(id.Tenant, a.key, a.requestID)
	}
	labels[labelPermit] = permitDigest(token)
	labels[labelLease] = a.lease.String()
	labels[labelAcquired] = time.Now().UTC().Format(time.RFC3339Nano)
	sem, err := s.client.Semaphore(sk, int(m.GetPermits()))
	if err != nil {
		return nil, s.storeError(ctx, "acquire permit", a.key, sk, err)
	}
	defer sem.Close()
	if a.requestID != "" && !a.firstTry {
		// A retry of a call that was granted, or is still waiting on this
		// server, must not take a second permit: it waits for that call,
		// then answers the permit its token holds, if any.
		defer s.permitCalls.enter(token)()
		if info, ok, err := s.permitOf(ctx, sem, sk, token); err != nil || ok {
			if err != nil {
				return nil, s.storeError(ctx, "acquire permit", a.key, sk, err)
			}
			return s.regrantPermit(ctx, sem, sk, a, token, info)
		}
	}
	wctx, cancel := s.waitContext(ctx, &a.wait)
	defer cancel()
	if a.wait > 0 {
		done, err := s.waiters.take(id.Tenant)
		if err != nil {
			return nil, err
		}
		defer done()
		s.metrics.wait(1)
		defer s.metrics.wait(-1)
	}
	start := time.Now()
	g, err := sem.AcquireToken(wctx, token, distlock.WithLease(a.lease), distlock.WithOwner(a.owner),
		distlock.WithBusinessID(a.businessID), distlock.WithMetadata(labels), distlock.WithWait(a.wait))
	if ambiguous(err) {
		if a.requestID == "" { // no retry can claim the token: give the permit back if it was granted
			actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), abandonBudget)
			_ = sem.ReleaseToken(actx, token)
			acancel()
		}
		if a.wait > 0 && time.Since(start) >= a.wait && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = distlock.ErrNotAcquired // the wait's end cut the last attempt short
		}
	}
	if errors.Is(err, distlock.ErrNotAcquired) && !s.stopping.Load() {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("acquire permit %q: all %d permits held (waited %v)", a.key, m.GetPermits(), a.wait))
	}
	if err != nil {
		return nil, s.storeError(ctx, "acquire permit", a.key, sk, err)
	}
	return permitGranted(g.Token, g.Fence, g.Lease, g.Sent), nil
}

// permitOf returns the live permit of token among sem's, by its label.
func (s *Server) permitOf(ctx context.Context, sem *distlock.Semaphore, sk, token string) (distlock.Info, bool, error) {
	info, err := sem.Inspect(ctx)
	if err != nil {
		return distlock.Info{}, false, err
	}
	want := permitDigest(token)
	for _, p := range info.Held {
		if p.Meta.Labels[labelPermit] == want {
			return p, true, nil
		}
	}
	return distlock.Info{}, false, nil
}

// regrantPermit answers the retry of an AcquirePermit whose token holds
// info: it renews the permit, within what is left of its group's hold cap,
// and answers its own fence.
func (s *Server) regrantPermit(ctx context.Context, sem *distlock.Semaphore, sk string, a acquireArgs, token string, info distlock.Info) (*connect.Response[distlockv1.AcquirePermitResponse], error) {
	lease, err := s.capLease(sk, info, a.lease, time.Now())
	if err == nil {
		sent := time.Now()
		if err = sem.RenewToken(ctx, token, lease); err == nil {
			return permitGranted(token, info.Fence, lease, sent), nil
		}
	}
	return nil, s.storeError(ctx, "acquire permit", a.key, sk, err)
}

// permitGranted is the response of a permit's grant.
func permitGranted(token string, fence uint64, lease time.Duration, sent time.Time) *connect.Response[distlockv1.AcquirePermitResponse] {
	d, at := expiry(lease, sent)
	return connect.NewResponse(&distlockv1.AcquirePermitResponse{Token: token, Fence: fence, Lease: d, ExpiresAt: at})
}

// RenewPermit extends a held permit by the lease given, or by the one it
// was acquired with, within its group's hold cap.
func (h *service) RenewPermit(ctx context.Context, req *connect.Request[distlockv1.RenewPermitRequest]) (*connect.Response[distlockv1.RenewPermitResponse], error) {
	s, m := h.s, req.Msg
	name, token := m.GetName(), m.GetToken()
	noteKey(ctx, short(name))
	sem, sk, err := s.permitCall(ctx, "renew permit", name, token)
	if err != nil {
		return nil, err
	}
	defer sem.Close()
	lease := time.Duration(0)
	if m.GetLease() != nil {
		if lease, err = checkDuration(name, "lease", m.GetLease(), distlock.MinLease, s.limits.MaxLease); err != nil {
			return nil, err
		}
	}
	if lease == 0 || s.maxHold(sk) > 0 {
		info, ok, err := s.permitOf(ctx, sem, sk, token)
		if err == nil && !ok {
			err = distlock.ErrNotHeld
		}
		if err != nil {
			return nil, s.storeError(ctx, "renew permit", name, sk, err)
		}
		if lease == 0 {
			lease = leaseOf(info, s.limits.DefaultLease)
		}
		if lease, err = s.capLease(sk, info, lease, time.Now()); err != nil {
			return nil, s.storeError(ctx, "renew permit", name, sk, err)
		}
	}
	sent := time.Now()
	if err := sem.RenewToken(ctx, token, lease); err != nil {
		return nil, s.storeError(ctx, "renew permit", name, sk, err)
	}
	d, at := expiry(lease, sent)
	return connect.NewResponse(&distlockv1.RenewPermitResponse{Lease: d, ExpiresAt: at}), nil
}

// ReleasePermit gives a permit back.
func (h *service) ReleasePermit(ctx context.Context, req *connect.Request[distlockv1.ReleasePermitRequest]) (*connect.Response[distlockv1.ReleasePermitResponse], error) {
	s, name := h.s, req.Msg.GetName()
	noteKey(ctx, short(name))
	sem, sk, err := s.permitCall(ctx, "release permit", name, req.Msg.GetToken())
	if err != nil {
		return nil, err
	}
	defer sem.Close()
	if err := sem.ReleaseToken(ctx, req.Msg.GetToken()); err != nil {
		return nil, s.storeError(ctx, "release permit", name, sk, err)
	}
	return connect.NewResponse(&distlockv1.ReleasePermitResponse{}), nil
}

// permitCall checks a renewal's or release's name and token and returns a
// handle on the tenant's semaphore, to be closed, and its store key.
func (s *Server) permitCall(ctx context.Context, op, name, token string) (*distlock.Semaphore, string, error) {
	if err := s.limits.checkKey(name); err != nil {
		return nil, "", err
	}
	if token == "" {
		return nil, "", invalid("%s %q: token is required", op, name)
	}
	sk := storeKey(callOf(ctx).id.Tenant, name)
	sem, err := s.client.Semaphore(sk, 1) // the number matters only to an acquisition
	if err != nil {
		return nil, "", s.storeError(ctx, op, name, sk, err)
	}
	return sem, sk, nil
}

// SetPermits changes a tenant's semaphore's number of permits.
func (h *service) SetPermits(ctx context.Context, req *connect.Request[distlockv1.SetPermitsRequest]) (*connect.Response[distlockv1.SetPermitsResponse], error) {
	s, name, n := h.s, req.Msg.GetName(), req.Msg.GetPermits()
	noteKey(ctx, short(name))
	if err := s.limits.checkKey(name); err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, invalid("semaphore %q: permits is %d: want at least 1", name, n)
	}
	sk := storeKey(callOf(ctx).id.Tenant, name)
	sem, err := s.client.Semaphore(sk, int(n))
	if err == nil {
		defer sem.Close()
		err = sem.SetPermits(ctx, int(n))
	}
	if err != nil {
		return nil, s.storeError(ctx, "set permits", name, sk, err)
	}
	return connect.NewResponse(&distlockv1.SetPermitsResponse{}), nil
}

// InspectPermits reports a tenant's semaphore: its number of permits and
// its live permits, without their tokens.
func (h *service) InspectPermits(ctx context.Context, req *connect.Request[distlockv1.InspectPermitsRequest]) (*connect.Response[distlockv1.InspectPermitsResponse], error) {
	s, name := h.s, req.Msg.GetName()
	noteKey(ctx, short(name))
	if err := s.limits.checkKey(name); err != nil {
		return nil, err
	}
	sk := storeKey(callOf(ctx).id.Tenant, name)
	sem, err := s.client.Semaphore(sk, 1)
	if err != nil {
		return nil, s.storeError(ctx, "inspect permits", name, sk, err)
	}
	defer sem.Close()
	info, err := sem.Inspect(ctx)
	if err != nil {
		return nil, s.storeError(ctx, "inspect permits", name, sk, err)
	}
	res := &distlockv1.InspectPermitsResponse{Permits: int32(min(info.Permits, 1<<31-1))}
	for _, p := range info.Held {
		p.Held = true
		res.Held = append(res.Held, lockOf(name, "", p))
	}
	return connect.NewResponse(res), nil
}

// callGate lets one call at a time through per token: a retried
// AcquirePermit waits for its first call on this server.
type callGate struct {
	mu    sync.Mutex
	calls map[string]chan struct{}
}

// enter waits until no call holds token, then holds it until the returned
// function is called.
func (g *callGate) enter(token string) func() {
	for {
		g.mu.Lock()
		if g.calls == nil {
			g.calls = make(map[string]chan struct{})
		}
		busy, ok := g.calls[token]
		if !ok {
			done := make(chan struct{})
			g.calls[token] = done
			g.mu.Unlock()
			return func() {
				g.mu.Lock()
				delete(g.calls, token)
				g.mu.Unlock()
				close(done)
			}
		}
		g.mu.Unlock()
		<-busy
	}
}
