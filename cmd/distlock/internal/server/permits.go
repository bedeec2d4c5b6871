package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// semaphore opens a handle on the semaphore sk of permits permits, whose
// holds take count permits each.
func (s *Server) semaphore(permits, count int) func(sk string) (holder, error) {
	return func(sk string) (holder, error) {
		sem, err := s.store.of(sk).Semaphore(sk, permits)
		if err != nil {
			return nil, err
		}
		return semaphoreHolds{sem, count}, nil
	}
}

// AcquirePermit takes a permit of a tenant's semaphore (see acquireHold).
func (h *service) AcquirePermit(ctx context.Context, req *connect.Request[distlockv1.AcquirePermitRequest]) (*connect.Response[distlockv1.AcquirePermitResponse], error) {
	s, m := h.s, req.Msg
	noteKey(ctx, short(m.GetName()))
	a, err := s.limits.checkAcquire(&distlockv1.AcquireRequest{Key: m.GetName(), Wait: m.GetWait(), Lease: m.GetLease(),
		Owner: m.GetOwner(), BusinessId: m.GetBusinessId(), Labels: m.GetLabels(), RequestId: m.GetRequestId(), FirstTry: m.GetFirstTry()})
	if err != nil {
		return nil, err
	}
	n, count := int(m.GetPermits()), max(int(m.GetCount()), 1)
	if n < 1 {
		return nil, invalid("semaphore %q: permits is %d: want at least 1", a.key, n)
	}
	if count > n || m.GetCount() < 0 {
		return nil, invalid("semaphore %q: count is %d: want 1 to its %d permits", a.key, m.GetCount(), n)
	}
	if m.GetIntent() != "" {
		if count < 2 {
			return nil, invalid("acquire permit %q: an intent is a call's of several permits: set count, or leave intent empty", a.key)
		}
		if err := checkIntent(a.key, m.GetIntent()); err != nil {
			return nil, err
		}
		a.extra = append(a.extra, distlock.WithPermitIntent(m.GetIntent()))
	}
	refused := fmt.Sprintf("all %d permits held", n)
	if count > 1 {
		refused = fmt.Sprintf("%d of %d permits not free, or an earlier call waits", count, n)
	}
	g, err := s.acquireHold(ctx, "acquire permit", a, s.semaphore(n, count), refused)
	if err != nil {
		s.withdrawIfGone(ctx, m.GetIntent(), func(ctx context.Context) error {
			sk := storeKey(callOf(ctx).id.Tenant, a.key)
			sem, err := s.store.of(sk).Semaphore(sk, n)
			if err != nil {
				return err
			}
			defer sem.Close()
			return sem.WithdrawIntent(ctx, m.GetIntent())
		})
		return nil, err
	}
	s.mon.noteShared(storeKey(callOf(ctx).id.Tenant, a.key), true)
	d, at := expiry(g.lease, g.sent)
	return connect.NewResponse(&distlockv1.AcquirePermitResponse{Token: g.token, Fence: g.fence, Lease: d, ExpiresAt: at}), nil
}

// RenewPermit extends a held permit by the lease given, or by the one it
// was acquired with, within its group's hold cap. (The number of permits
// matters only to an acquisition.)
func (h *service) RenewPermit(ctx context.Context, req *connect.Request[distlockv1.RenewPermitRequest]) (*connect.Response[distlockv1.RenewPermitResponse], error) {
	d, at, err := h.s.renewByToken(ctx, "renew permit", req.Msg.GetName(), req.Msg.GetToken(), req.Msg.GetLease(), h.s.semaphore(1, 1))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&distlockv1.RenewPermitResponse{Lease: d, ExpiresAt: at}), nil
}

// ReleasePermit gives a permit back.
func (h *service) ReleasePermit(ctx context.Context, req *connect.Request[distlockv1.ReleasePermitRequest]) (*connect.Response[distlockv1.ReleasePermitResponse], error) {
	if err := h.s.releaseByToken(ctx, "release permit", req.Msg.GetName(), req.Msg.GetToken(), h.s.semaphore(1, 1)); err != nil {
		return nil, err
	}
	return connect.NewResponse(&distlockv1.ReleasePermitResponse{}), nil
}

// SetPermits changes a tenant's semaphore's number of permits.
func (h *service) SetPermits(ctx context.Context, req *connect.Request[distlockv1.SetPermitsRequest]) (*connect.Response[distlockv1.SetPermitsResponse], error) {
	s, name, n := h.s, req.Msg.GetName(), int(req.Msg.GetPermits())
	sk, err := s.tenantKey(ctx, name)
	if err != nil {
		return nil, err
	}
	if n < 1 {
		return nil, invalid("semaphore %q: permits is %d: want at least 1", name, n)
	}
	sem, err := s.store.of(sk).Semaphore(sk, n)
	if err == nil {
		defer sem.Close()
		err = sem.SetPermits(ctx, n)
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
	sk, err := s.tenantKey(ctx, name)
	if err != nil {
		return nil, err
	}
	var info distlock.SemaphoreInfo
	sem, err := s.store.of(sk).Semaphore(sk, 1)
	if err == nil {
		defer sem.Close()
		info, err = sem.Inspect(ctx)
	}
	if err != nil {
		return nil, s.storeError(ctx, "inspect permits", name, sk, err)
	}
	return connect.NewResponse(&distlockv1.InspectPermitsResponse{Permits: int32(min(info.Permits, 1<<31-1)), Held: shownHolds(name, info.Held)}), nil
}

// WithdrawPermitIntent ends the intent of a call of several permits on a
// tenant's semaphore.
func (h *service) WithdrawPermitIntent(ctx context.Context, req *connect.Request[distlockv1.WithdrawPermitIntentRequest]) (*connect.Response[distlockv1.WithdrawPermitIntentResponse], error) {
	s, name, intent := h.s, req.Msg.GetName(), req.Msg.GetIntent()
	sk, err := s.tenantKey(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := checkIntent(name, intent); err != nil {
		return nil, err
	}
	sem, err := s.store.of(sk).Semaphore(sk, 1)
	if err == nil {
		defer sem.Close()
		err = sem.WithdrawIntent(ctx, intent)
	}
	if err != nil {
		return nil, s.storeError(ctx, "withdraw permit intent", name, sk, err)
	}
	return connect.NewResponse(&distlockv1.WithdrawPermitIntentResponse{}), nil
}
