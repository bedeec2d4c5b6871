package server

import (
	"context"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// rwLock opens a handle on the read-write lock sk, whose holds are taken in
// write's mode.
func (s *Server) rwLock(write bool) func(sk string) (holder, error) {
	return func(sk string) (holder, error) {
		m, err := s.store.of(sk).RWMutex(sk)
		if err != nil {
			return nil, err
		}
		return rwHolds{m, write}, nil
	}
}

// AcquireRW takes a reader's or the writer's hold of a tenant's read-write
// lock (see acquireHold).
func (h *service) AcquireRW(ctx context.Context, req *connect.Request[distlockv1.AcquireRWRequest]) (*connect.Response[distlockv1.AcquireRWResponse], error) {
	s, m := h.s, req.Msg
	noteKey(ctx, short(m.GetName()))
	a, err := s.limits.checkAcquire(&distlockv1.AcquireRequest{Key: m.GetName(), Wait: m.GetWait(), Lease: m.GetLease(),
		Owner: m.GetOwner(), BusinessId: m.GetBusinessId(), Labels: m.GetLabels(), RequestId: m.GetRequestId(), FirstTry: m.GetFirstTry()})
	if err != nil {
		return nil, err
	}
	refused := "held by a writer, or a writer waits"
	if m.GetWrite() {
		refused = "held by readers or a writer"
	}
	if m.GetIntent() != "" {
		if !m.GetWrite() {
			return nil, invalid("acquire rw %q: an intent is a writer's: set write, or leave intent empty", a.key)
		}
		if err := checkIntent(a.key, m.GetIntent()); err != nil {
			return nil, err
		}
		a.extra = append(a.extra, distlock.WithWriteIntent(m.GetIntent()))
	}
	g, err := s.acquireHold(ctx, "acquire rw", a, s.rwLock(m.GetWrite()), refused)
	if err != nil {
		s.withdrawIfGone(ctx, m.GetIntent(), func(ctx context.Context) error {
			sk := storeKey(callOf(ctx).id.Tenant, a.key)
			rw, err := s.store.of(sk).RWMutex(sk)
			if err != nil {
				return err
			}
			defer rw.Close()
			return rw.WithdrawIntent(ctx, m.GetIntent())
		})
		return nil, err
	}
	s.mon.noteShared(storeKey(callOf(ctx).id.Tenant, a.key), false)
	d, at := expiry(g.lease, g.sent)
	return connect.NewResponse(&distlockv1.AcquireRWResponse{Token: g.token, Fence: g.fence, Lease: d, ExpiresAt: at}), nil
}

// RenewRW extends a hold of either mode by the lease given, or by the one
// it was acquired with, within its group's hold cap. (Renewals and releases
// are of either mode.)
func (h *service) RenewRW(ctx context.Context, req *connect.Request[distlockv1.RenewRWRequest]) (*connect.Response[distlockv1.RenewRWResponse], error) {
	d, at, err := h.s.renewByToken(ctx, "renew rw", req.Msg.GetName(), req.Msg.GetToken(), req.Msg.GetLease(), h.s.rwLock(false))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&distlockv1.RenewRWResponse{Lease: d, ExpiresAt: at}), nil
}

// ReleaseRW frees a hold of either mode.
func (h *service) ReleaseRW(ctx context.Context, req *connect.Request[distlockv1.ReleaseRWRequest]) (*connect.Response[distlockv1.ReleaseRWResponse], error) {
	if err := h.s.releaseByToken(ctx, "release rw", req.Msg.GetName(), req.Msg.GetToken(), h.s.rwLock(false)); err != nil {
		return nil, err
	}
	return connect.NewResponse(&distlockv1.ReleaseRWResponse{}), nil
}

// InspectRW reports a tenant's read-write lock: its holds, without their
// tokens, and its waiting writers.
func (h *service) InspectRW(ctx context.Context, req *connect.Request[distlockv1.InspectRWRequest]) (*connect.Response[distlockv1.InspectRWResponse], error) {
	s, name := h.s, req.Msg.GetName()
	sk, err := s.tenantKey(ctx, name)
	if err != nil {
		return nil, err
	}
	var info distlock.RWInfo
	m, err := s.store.of(sk).RWMutex(sk)
	if err == nil {
		defer m.Close()
		info, err = m.Inspect(ctx)
	}
	if err != nil {
		return nil, s.storeError(ctx, "inspect rw", name, sk, err)
	}
	return connect.NewResponse(&distlockv1.InspectRWResponse{Writer: info.Writer, Held: shownHolds(name, info.Held),
		WritersWaiting: int32(min(info.WritersWaiting, 1<<31-1))}), nil
}

// WithdrawIntent ends a writer's intent on a tenant's read-write lock.
func (h *service) WithdrawIntent(ctx context.Context, req *connect.Request[distlockv1.WithdrawIntentRequest]) (*connect.Response[distlockv1.WithdrawIntentResponse], error) {
	s, name, intent := h.s, req.Msg.GetName(), req.Msg.GetIntent()
	sk, err := s.tenantKey(ctx, name)
	if err != nil {
		return nil, err
	}
	if err := checkIntent(name, intent); err != nil {
		return nil, err
	}
	m, err := s.store.of(sk).RWMutex(sk)
	if err == nil {
		defer m.Close()
		err = m.WithdrawIntent(ctx, intent)
	}
	if err != nil {
		return nil, s.storeError(ctx, "withdraw intent", name, sk, err)
	}
	return connect.NewResponse(&distlockv1.WithdrawIntentResponse{}), nil
}

// DowngradeRW turns the writer's hold of a token into a reader's.
func (h *service) DowngradeRW(ctx context.Context, req *connect.Request[distlockv1.DowngradeRWRequest]) (*connect.Response[distlockv1.DowngradeRWResponse], error) {
	s, m := h.s, req.Msg
	c, err := s.openHold(ctx, "downgrade rw", m.GetName(), m.GetToken(), s.rwLock(false))
	if err != nil {
		return nil, err
	}
	defer c.h.Close()
	if err := c.h.(rwHolds).DowngradeToken(ctx, m.GetToken()); err != nil {
		return nil, s.storeError(ctx, c.op, c.name, c.sk, err)
	}
	s.mon.noteShared(c.sk, false)
	return connect.NewResponse(&distlockv1.DowngradeRWResponse{}), nil
}

// withdrawIfGone withdraws a caller's intent when its call ended because
// the caller went away. The call's wait, running until the server saw
// that, renewed the intent with each attempt, maybe after the caller
// withdrew it itself: left, it would keep later callers out for
// driver.WriteIntentTTL.
func (s *Server) withdrawIfGone(ctx context.Context, intent string, withdraw func(ctx context.Context) error) {
	if intent == "" || ctx.Err() == nil {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := withdraw(wctx); err != nil {
		s.log.Warn("withdraw the intent of a call whose caller went away", "err", err)
	}
}

// maxIntentLen bounds a writer's intent id.
const maxIntentLen = 128

// checkIntent checks a writer's intent id: 1 to maxIntentLen letters,
// digits, '-' or '_'.
func checkIntent(name, intent string) error {
	if intent == "" || len(intent) > maxIntentLen {
		return invalid("%q: intent is %d bytes: want 1 to %d", name, len(intent), maxIntentLen)
	}
	for _, r := range intent {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return invalid("%q: intent %q: want letters, digits, '-' and '_' only", name, intent)
		}
	}
	return nil
}
