package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// Sessions live in the store, so that any server can serve them. A session
// is a lock on sessionKey(tenant, H) with token S, where S is the secret
// session id the caller holds and H = sessionHandle(S) its public handle; its
// TTL is in its labelTTL label. A lock of the session carries labelSession H
// and labelNonce N, and its token is sessionLockToken(S, key, N): KeepAlive
// and CloseSession find the session's locks by listing the tenant's keys
// and make their tokens from S.

// OpenSession starts a session with the TTL asked (the default lease if
// none).
func (h *service) OpenSession(ctx context.Context, req *connect.Request[distlockv1.OpenSessionRequest]) (*connect.Response[distlockv1.OpenSessionResponse], error) {
	s := h.s
	ttl := s.limits.DefaultLease
	if req.Msg.GetTtl() != nil {
		var err error
		if ttl, err = checkDuration("", "ttl", req.Msg.GetTtl(), distlock.MinLease, s.limits.MaxLease); err != nil {
			return nil, err
		}
	}
	secret := randomHex(secretLen)
	handle := sessionHandle(secret)
	noteKey(ctx, handle)
	sk := sessionKey(callOf(ctx).id.Tenant, handle)
	g, err := s.client.AcquireToken(ctx, sk, secret, distlock.WithLease(ttl),
		distlock.WithMetadata(map[string]string{labelTTL: ttl.String()}))
	if err != nil {
		return nil, s.storeError(ctx, "open session", handle, sk, err)
	}
	d, at := expiry(ttl, g.Sent)
	return connect.NewResponse(&distlockv1.OpenSessionResponse{SessionId: secret, Ttl: d, ExpiresAt: at}), nil
}

// renewSession renews tenant's session whose secret is secret and returns
// its TTL and when the renewal was sent, or NotFound if the session has
// ended (or never was).
func (s *Server) renewSession(ctx context.Context, tenant, secret string) (time.Duration, time.Time, error) {
	handle := sessionHandle(secret)
	sk := sessionKey(tenant, handle)
	info, err := s.client.Inspect(ctx, sk)
	if err != nil {
		return 0, time.Time{}, s.storeError(ctx, "session", handle, sk, err)
	}
	if !info.Held {
		return 0, time.Time{}, errNoSession(handle)
	}
	ttl, err := time.ParseDuration(info.Meta.Labels[labelTTL])
	if err != nil || ttl < distlock.MinLease {
		ttl = s.limits.DefaultLease
	}
	sent := time.Now()
	switch err := s.client.RenewToken(ctx, sk, secret, ttl); {
	case errors.Is(err, distlock.ErrNotHeld):
		return 0, time.Time{}, errNoSession(handle)
	case err != nil:
		return 0, time.Time{}, s.storeError(ctx, "session", handle, sk, err)
	}
	return ttl, sent, nil
}

// errNoSession is the NotFound of an unknown or ended session.
func errNoSession(handle string) error {
	return connect.NewError(connect.CodeNotFound,
		fmt.Errorf("session %s: not found: it ended (its TTL passed without a KeepAlive, or it was closed) or never was", handle))
}

// sessionLock is a lock of a session: its token, and what List said of it.
type sessionLock struct {
	token string
	info  distlock.Info
}

// sessionLocks returns the locks of tenant's session with secret secret,
// by store key.
func (s *Server) sessionLocks(ctx context.Context, tenant, secret string) (map[string]sessionLock, error) {
	handle := sessionHandle(secret)
	ns := namespace(tenant)
	infos, err := s.client.List(ctx, ns)
	if err != nil {
		return nil, s.storeError(ctx, "session", handle, ns, err)
	}
	locks := make(map[string]sessionLock)
	for _, i := range infos {
		_, key, ok := splitStoreKey(i.Key)
		if !ok || i.Meta.Labels[labelSession] != handle {
			continue
		}
		locks[i.Key] = sessionLock{token: sessionLockToken(secret, key, i.Meta.Labels[labelNonce]), info: i}
	}
	return locks, nil
}

// KeepAlive renews a session, then each of its locks, by the session's TTL
// (shortened to what is left of a lock's max hold). A lock that ended
// meanwhile, or reached its max hold, is not counted; a store failure ends
// the call (the locks not yet renewed then have what is left of their TTL).
func (h *service) KeepAlive(ctx context.Context, req *connect.Request[distlockv1.KeepAliveRequest]) (*connect.Response[distlockv1.KeepAliveResponse], error) {
	s := h.s
	secret := req.Msg.GetSessionId()
	if err := checkSessionID("keep alive", secret); err != nil {
		return nil, err
	}
	tenant := callOf(ctx).id.Tenant
	noteKey(ctx, sessionHandle(secret))
	ttl, sent, err := s.renewSession(ctx, tenant, secret)
	if err != nil {
		return nil, err
	}
	locks, err := s.sessionLocks(ctx, tenant, secret)
	if err != nil {
		return nil, err
	}
	n := 0
	for sk, l := range locks {
		lease, err := s.capLease(sk, l.info, ttl, time.Now())
		if err != nil {
			continue
		}
		switch err := s.client.RenewToken(ctx, sk, l.token, lease); {
		case errors.Is(err, distlock.ErrNotHeld):
		case err != nil:
			_, key, _ := splitStoreKey(sk)
			return nil, s.storeError(ctx, "keep alive", key, sk, err)
		default:
			n++
		}
	}
	d, at := expiry(ttl, sent)
	return connect.NewResponse(&distlockv1.KeepAliveResponse{Ttl: d, ExpiresAt: at, Locks: int32(n)}), nil
}

// CloseSession releases each lock of a session, then the session. NotFound
// if the session had ended and none of its locks was left.
func (h *service) CloseSession(ctx context.Context, req *connect.Request[distlockv1.CloseSessionRequest]) (*connect.Response[distlockv1.CloseSessionResponse], error) {
	s := h.s
	secret := req.Msg.GetSessionId()
	if err := checkSessionID("close session", secret); err != nil {
		return nil, err
	}
	tenant := callOf(ctx).id.Tenant
	handle := sessionHandle(secret)
	noteKey(ctx, handle)
	locks, err := s.sessionLocks(ctx, tenant, secret)
	if err != nil {
		return nil, err
	}
	n := 0
	for sk, l := range locks {
		switch err := s.client.ReleaseToken(ctx, sk, l.token); {
		case errors.Is(err, distlock.ErrNotHeld):
		case err != nil:
			_, key, _ := splitStoreKey(sk)
			return nil, s.storeError(ctx, "close session", key, sk, err)
		default:
			n++
			s.events.publish(tenant, change{typ: distlockv1.Event_TYPE_RELEASED, at: time.Now(), info: distlock.Info{Key: sk}})
		}
	}
	sk := sessionKey(tenant, handle)
	switch err := s.client.ReleaseToken(ctx, sk, secret); {
	case errors.Is(err, distlock.ErrNotHeld) && n == 0:
		return nil, errNoSession(handle)
	case err != nil && !errors.Is(err, distlock.ErrNotHeld):
		return nil, s.storeError(ctx, "close session", handle, sk, err)
	}
	return connect.NewResponse(&distlockv1.CloseSessionResponse{Locks: int32(n)}), nil
}
