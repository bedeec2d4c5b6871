package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// Sessions live in the store, so that any server can serve them. A session
// is a lock on sessionKey(tenant, H) with token S, where S is the secret
// session id the caller holds and H = sessionHandle(S) its public handle; its
// TTL is in its labelTTL label. A lock of the session carries labelSession H
// and labelNonce N, and its token is sessionLockToken(S, key, N).
//
// Each lock of the session has a member: a lock on memberKey(tenant, H,
// key, N), under membersOf(tenant, H), with the token memberToken(S, key, N)
// and the session's TTL, labelled with the key and N. It is taken once the lock is granted,
// before the grant is answered, so a caller never learns of a lock of its
// session without a member. KeepAlive and CloseSession read the session's
// members, a range of the store as long as the session has locks, never
// the tenant's keys; a member whose lock has ended is released at the next
// KeepAlive. A session opened by an earlier release (without labelMembers)
// has no members, and its locks are found by listing the tenant's keys.

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
	g, err := s.store.of(sk).AcquireToken(ctx, sk, secret, distlock.WithLease(ttl),
		distlock.WithMetadata(map[string]string{labelTTL: ttl.String(), labelMembers: "1"}))
	if err != nil {
		return nil, s.storeError(ctx, "open session", handle, sk, err)
	}
	s.sessions.put(sk, session{ttl: ttl, members: true})
	d, at := expiry(ttl, g.Sent)
	return connect.NewResponse(&distlockv1.OpenSessionResponse{SessionId: secret, Ttl: d, ExpiresAt: at}), nil
}

// session is what renewSession learnt of a session.
type session struct {
	ttl     time.Duration
	sent    time.Time // when the renewal was sent
	members bool      // its locks have members (labelMembers)
}

// renewSession renews tenant's session whose secret is secret, or returns
// NotFound if the session has ended (or never was). What the store says of
// the session is read once per server (see sessionCache).
func (s *Server) renewSession(ctx context.Context, tenant, secret string) (session, error) {
	handle := sessionHandle(secret)
	sk := sessionKey(tenant, handle)
	ss, known := s.sessions.get(sk)
	if !known {
		info, err := s.store.of(sk).Inspect(ctx, sk)
		if err != nil {
			return session{}, s.storeError(ctx, "session", handle, sk, err)
		}
		if !info.Held {
			return session{}, errNoSession(handle)
		}
		ss.ttl, err = time.ParseDuration(info.Meta.Labels[labelTTL])
		if err != nil || ss.ttl < distlock.MinLease {
			ss.ttl = s.limits.DefaultLease
		}
		ss.members = info.Meta.Labels[labelMembers] != ""
	}
	ss.sent = time.Now()
	switch err := s.store.of(sk).RenewToken(ctx, sk, secret, ss.ttl); {
	case errors.Is(err, distlock.ErrNotHeld):
		s.sessions.forget(sk)
		return session{}, errNoSession(handle)
	case err != nil:
		return session{}, s.storeError(ctx, "session", handle, sk, err)
	}
	if !known {
		s.sessions.put(sk, ss)
	}
	return ss, nil
}

// sessionCache keeps, by store key, what the store says of sessions: their
// TTL and whether they have members, neither of which changes while a
// session lives. So a KeepAlive renews its session without reading it
// first; a renewal that finds it ended forgets it. It holds at most
// maxCachedSessions, and forgets them all when full.
type sessionCache struct {
	mu sync.Mutex
	m  map[string]session
}

// maxCachedSessions bounds a sessionCache: some 10 MiB.
const maxCachedSessions = 1 << 16

func (c *sessionCache) get(sk string) (session, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ss, ok := c.m[sk]
	return ss, ok
}

func (c *sessionCache) put(sk string, ss session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxCachedSessions {
		c.m = make(map[string]session)
	}
	c.m[sk] = ss
}

func (c *sessionCache) forget(sk string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, sk)
}

// keepMember renews the member of the session lock on key with nonce, or
// takes it if it is not there: a new grant's, or one that expired. fresh
// says which to try first.
func (s *Server) keepMember(ctx context.Context, tenant, secret, key, nonce string, ttl time.Duration, fresh bool) error {
	mk := memberKey(tenant, sessionHandle(secret), key, nonce)
	token := memberToken(secret, key, nonce)
	renew := func() error { return s.store.of(mk).RenewToken(ctx, mk, token, ttl) }
	take := func() error {
		_, err := s.store.of(mk).AcquireToken(ctx, mk, token, distlock.WithLease(ttl),
			distlock.WithMetadata(map[string]string{labelKey: key, labelNonce: nonce}))
		return err
	}
	first, then, refused := renew, take, distlock.ErrNotHeld
	if fresh {
		first, then, refused = take, renew, distlock.ErrNotAcquired // a retry's member is there already
	}
	err := first()
	if errors.Is(err, refused) {
		err = then()
	}
	if err != nil {
		return s.storeError(ctx, "session", key, mk, err)
	}
	return nil
}

// errNoSession is the NotFound of an unknown or ended session.
func errNoSession(handle string) error {
	return connect.NewError(connect.CodeNotFound,
		fmt.Errorf("session %s: not found: it ended (its TTL passed without a KeepAlive, or it was closed) or never was", handle))
}

// sessionLock is a lock of a session, found through its member (member
// names it) or, for a session without members, by listing its tenant's
// keys (info is then what List said of it).
type sessionLock struct {
	key, nonce, token string
	member            string // its member's store key, "" for a session without members
	memberToken       string
	info              distlock.Info
}

// sessionLocks returns the locks of tenant's session with secret secret, by
// store key: those its members name, or for a session without members (see
// session), its tenant's locks that carry its handle.
func (s *Server) sessionLocks(ctx context.Context, tenant, secret string, members bool) (map[string]sessionLock, error) {
	handle := sessionHandle(secret)
	prefix := namespace(tenant)
	if members {
		prefix = membersOf(tenant, handle)
	}
	infos, err := s.store.List(ctx, prefix)
	if err != nil {
		return nil, s.storeError(ctx, "session", handle, prefix, err)
	}
	locks := make(map[string]sessionLock)
	for _, i := range infos {
		l := sessionLock{key: i.Meta.Labels[labelKey], nonce: i.Meta.Labels[labelNonce], member: i.Key}
		if !members {
			_, l.key, _ = splitStoreKey(i.Key)
			l.member, l.info = "", i
			if i.Meta.Labels[labelSession] != handle {
				continue
			}
		}
		if l.key == "" {
			continue
		}
		l.token = sessionLockToken(secret, l.key, l.nonce)
		l.memberToken = memberToken(secret, l.key, l.nonce)
		locks[storeKey(tenant, l.key)] = l
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
	ss, err := s.renewSession(ctx, tenant, secret)
	if err != nil {
		return nil, err
	}
	locks, err := s.sessionLocks(ctx, tenant, secret, ss.members)
	if err != nil {
		return nil, err
	}
	n := 0
	for sk, l := range locks {
		lease, err := s.sessionLease(ctx, sk, l, ss.ttl)
		if err != nil {
			continue
		}
		switch err := s.store.of(sk).RenewToken(ctx, sk, l.token, lease); {
		case errors.Is(err, distlock.ErrNotHeld):
			if l.member != "" { // the lock ended: so does its member
				_ = s.store.of(l.member).ReleaseToken(ctx, l.member, l.memberToken)
			}
		case err != nil:
			return nil, s.storeError(ctx, "keep alive", l.key, sk, err)
		default:
			n++
			if l.member != "" {
				if err := s.keepMember(ctx, tenant, secret, l.key, l.nonce, ss.ttl, false); err != nil {
					return nil, err
				}
			}
		}
	}
	d, at := expiry(ss.ttl, ss.sent)
	return connect.NewResponse(&distlockv1.KeepAliveResponse{Ttl: d, ExpiresAt: at, Locks: int32(n)}), nil
}

// sessionLease is the lease that KeepAlive renews the session lock l on sk
// by: the session's TTL, within what is left of the lock's max hold (read
// from the store only where its group has one); an error if the cap is
// reached.
func (s *Server) sessionLease(ctx context.Context, sk string, l sessionLock, ttl time.Duration) (time.Duration, error) {
	if s.maxHold(sk) <= 0 {
		return ttl, nil
	}
	info := l.info
	if l.member != "" {
		var err error
		if info, err = s.store.of(sk).Inspect(ctx, sk); err != nil {
			return 0, err
		}
	}
	return s.capLease(sk, info, ttl, time.Now())
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
	sk := sessionKey(tenant, handle)
	s.sessions.forget(sk)
	info, err := s.store.of(sk).Inspect(ctx, sk)
	if err != nil {
		return nil, s.storeError(ctx, "close session", handle, sk, err)
	}
	// A session that has ended keeps no label: its members, if any, are
	// read, and they name nothing if it had none.
	locks, err := s.sessionLocks(ctx, tenant, secret, !info.Held || info.Meta.Labels[labelMembers] != "")
	if err != nil {
		return nil, err
	}
	n := 0
	for lk, l := range locks {
		switch err := s.store.of(lk).ReleaseToken(ctx, lk, l.token); {
		case errors.Is(err, distlock.ErrNotHeld):
		case err != nil:
			return nil, s.storeError(ctx, "close session", l.key, lk, err)
		default:
			n++
			s.events.publish(tenant, change{typ: distlockv1.Event_TYPE_RELEASED, at: time.Now(), token: l.token, info: distlock.Info{Key: lk}})
		}
		if l.member != "" {
			_ = s.store.of(l.member).ReleaseToken(ctx, l.member, l.memberToken)
		}
	}
	switch err := s.store.of(sk).ReleaseToken(ctx, sk, secret); {
	case errors.Is(err, distlock.ErrNotHeld) && n == 0:
		return nil, errNoSession(handle)
	case err != nil && !errors.Is(err, distlock.ErrNotHeld):
		return nil, s.storeError(ctx, "close session", handle, sk, err)
	}
	return connect.NewResponse(&distlockv1.CloseSessionResponse{Locks: int32(n)}), nil
}
