package server

import (
	"context"
	"fmt"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/election"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// electionKey is the lock key of the election name, as package election
// keeps it, so that Go candidates through the library and others through
// the service take part in one election.
func electionKey(name string) (string, error) {
	if name == "" {
		return "", invalid("election: name is required")
	}
	return election.KeyPrefix + name, nil
}

// Campaign waits to lead an election: an Acquire of its lock, holding the
// candidate's value.
func (h *service) Campaign(ctx context.Context, req *connect.Request[distlockv1.CampaignRequest]) (*connect.Response[distlockv1.CampaignResponse], error) {
	m := req.Msg
	key, err := electionKey(m.GetName())
	if err != nil {
		return nil, err
	}
	res, err := h.Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{
		Key: key, Wait: m.GetWait(), Lease: m.GetLease(), Owner: m.GetOwner(),
		Labels:    map[string]string{election.ValueLabel: m.GetValue()},
		RequestId: m.GetRequestId(), FirstTry: m.GetFirstTry(),
	}))
	if connect.CodeOf(err) == connect.CodeAborted {
		return nil, connect.NewError(connect.CodeAborted, fmt.Errorf("campaign %q: another candidate leads (waited %v)", m.GetName(), m.GetWait().AsDuration()))
	}
	if err != nil {
		return nil, err
	}
	g := res.Msg
	return connect.NewResponse(&distlockv1.CampaignResponse{Token: g.GetToken(), Fence: g.GetFence(), Lease: g.GetLease(), ExpiresAt: g.GetExpiresAt(), Key: key}), nil
}

// Leader reports who leads an election.
func (h *service) Leader(ctx context.Context, req *connect.Request[distlockv1.LeaderRequest]) (*connect.Response[distlockv1.LeaderResponse], error) {
	key, err := electionKey(req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	res, err := h.Inspect(ctx, connect.NewRequest(&distlockv1.InspectRequest{Key: key}))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(leaderOf(res.Msg.GetLock())), nil
}

// leaderOf is who leads, as l, the election's lock, tells.
func leaderOf(l *distlockv1.Lock) *distlockv1.LeaderResponse {
	if !l.GetHeld() {
		return &distlockv1.LeaderResponse{}
	}
	return &distlockv1.LeaderResponse{Held: true, Value: l.GetLabels()[election.ValueLabel], Fence: l.GetFence(), Owner: l.GetOwner(), Ttl: l.GetTtl()}
}

// Observe streams an election's leader: the current one once the stream is
// live, then each change of its lock, in term order.
func (h *service) Observe(ctx context.Context, req *connect.Request[distlockv1.ObserveRequest], stream *connect.ServerStream[distlockv1.ObserveResponse]) error {
	key, err := electionKey(req.Msg.GetName())
	if err != nil {
		return err
	}
	var last *distlockv1.LeaderResponse
	send := func(l *distlockv1.LeaderResponse) error {
		// A term never goes back: an older one (a reading that raced a
		// change) is not news, nor is the same one again.
		if last != nil && (l.GetFence() < last.GetFence() || l.GetFence() == last.GetFence() && l.GetHeld() == last.GetHeld()) {
			return nil
		}
		last = l
		return stream.Send(&distlockv1.ObserveResponse{Leader: l})
	}
	live := func() error {
		stream.ResponseHeader().Set(liveHeader, "1")
		res, err := h.Inspect(ctx, connect.NewRequest(&distlockv1.InspectRequest{Key: key}))
		if err != nil {
			return err
		}
		return send(leaderOf(res.Msg.GetLock()))
	}
	return h.s.follow(ctx, key, live, func(e *distlockv1.Event) error {
		l := e.GetLock()
		if l.GetKey() != key { // another election whose name begins with this one's
			return nil
		}
		switch e.GetType() {
		case distlockv1.Event_TYPE_ACQUIRED:
			return send(leaderOf(l))
		case distlockv1.Event_TYPE_RELEASE_REQUESTED:
			return nil // the leader was asked to resign; it still leads
		}
		return send(&distlockv1.LeaderResponse{Fence: l.GetFence()}) // the term ended
	})
}

// Resign ends the caller's term.
func (h *service) Resign(ctx context.Context, req *connect.Request[distlockv1.ResignRequest]) (*connect.Response[distlockv1.ResignResponse], error) {
	key, err := electionKey(req.Msg.GetName())
	if err != nil {
		return nil, err
	}
	if _, err := h.Release(ctx, connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: req.Msg.GetToken()})); err != nil {
		return nil, err
	}
	return connect.NewResponse(&distlockv1.ResignResponse{}), nil
}
