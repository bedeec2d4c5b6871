package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// holder is a primitive whose holds the service takes by token for its
// callers: a semaphore's permits, or a read-write lock's holds of one mode.
// A handle is opened for one call and closed after it; it keeps nothing.
type holder interface {
	AcquireToken(ctx context.Context, token string, opts ...distlock.Option) (distlock.TokenGrant, error)
	RenewToken(ctx context.Context, token string, lease time.Duration) error
	ReleaseToken(ctx context.Context, token string) error
	// holds returns the live holds, without their tokens.
	holds(ctx context.Context) ([]distlock.Info, error)
	Close() error
}

// semaphoreHolds are a semaphore's holds, of count permits each.
type semaphoreHolds struct {
	*distlock.Semaphore
	count int
}

func (h semaphoreHolds) AcquireToken(ctx context.Context, token string, opts ...distlock.Option) (distlock.TokenGrant, error) {
	return h.Semaphore.AcquireTokenN(ctx, h.count, token, opts...)
}

func (h semaphoreHolds) holds(ctx context.Context) ([]distlock.Info, error) {
	info, err := h.Inspect(ctx)
	return info.Held, err
}

// rwHolds are a read-write lock's holds, taken in one mode.
type rwHolds struct {
	*distlock.RWMutex
	write bool
}

func (h rwHolds) AcquireToken(ctx context.Context, token string, opts ...distlock.Option) (distlock.TokenGrant, error) {
	return h.RWMutex.AcquireToken(ctx, h.write, token, opts...)
}

func (h rwHolds) holds(ctx context.Context) ([]distlock.Info, error) {
	info, err := h.Inspect(ctx)
	return info.Held, err
}

// labelHold names a hold among its name's: a digest of its token, which
// an inspection shows (tokens it never shows), so that a retry and a
// renewal find their own hold's fence and grant time.
const labelHold = "distlock.hold"

// holdDigest is the labelHold of the hold of token.
func holdDigest(token string) string { return digest(nonceLen, "distlock-hold", token) }

// holdCall is one call on the holds of a tenant's name, checked.
type holdCall struct {
	op   string // names the call in errors: "acquire permit", "renew rw", ...
	name string // the caller's name
	sk   string // the name in the store
	h    holder
}

// openHold checks a renewal's or release's name and token and opens the
// tenant's holder of name with open; the caller closes it.
func (s *Server) openHold(ctx context.Context, op, name, token string, open func(sk string) (holder, error)) (holdCall, error) {
	sk, err := s.tenantKey(ctx, name)
	if err != nil {
		return holdCall{}, err
	}
	if token == "" {
		return holdCall{}, invalid("%s %q: token is required", op, name)
	}
	h, err := open(sk)
	if err != nil {
		return holdCall{}, s.storeError(ctx, op, name, sk, err)
	}
	return holdCall{op: op, name: name, sk: sk, h: h}, nil
}

// tenantKey checks a name the caller gave and returns it in the store,
// in the caller's tenant's namespace.
func (s *Server) tenantKey(ctx context.Context, name string) (string, error) {
	noteKey(ctx, short(name))
	if err := s.limits.checkKey(name); err != nil {
		return "", err
	}
	return storeKey(callOf(ctx).id.Tenant, name), nil
}

// heldGrant is a hold granted: what the caller is answered.
type heldGrant struct {
	token string
	fence uint64
	lease time.Duration
	sent  time.Time
}

// acquireHold takes a hold of a tenant's name for a new token (one derived
// from the request id, so that a retry finds it), waiting as asked but
// never past the call's deadline or Shutdown; refused names what was
// refused, for the ABORTED answer. The lease, the group's lease and hold
// cap, the labels and the waiter cap are a lock's.
func (s *Server) acquireHold(ctx context.Context, op string, a acquireArgs, open func(sk string) (holder, error), refused string) (heldGrant, error) {
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
	labels[labelHold] = holdDigest(token)
	labels[labelLease] = a.lease.String()
	labels[labelAcquired] = time.Now().UTC().Format(time.RFC3339Nano)
	h, err := open(sk)
	if err != nil {
		return heldGrant{}, s.storeError(ctx, op, a.key, sk, err)
	}
	defer h.Close()
	c := holdCall{op: op, name: a.key, sk: sk, h: h}
	if a.requestID != "" {
		// A retry of a call that was granted, or is still waiting on this
		// server, must not take a second hold: every call of a request id
		// passes a gate one at a time, and a retry (not a first try) then
		// answers the hold its token has, if any.
		leave, err := s.holdCalls.enter(ctx, s.stopCtx, token)
		if err != nil {
			return heldGrant{}, s.storeError(ctx, op, a.key, sk, err)
		}
		defer leave()
	}
	if a.requestID != "" && !a.firstTry {
		if info, ok, err := s.holdOf(ctx, c, token); err != nil || ok {
			if err != nil {
				return heldGrant{}, s.storeError(ctx, op, a.key, sk, err)
			}
			return s.regrantHold(ctx, c, a.lease, token, info)
		}
	}
	wctx, cancel := s.waitContext(ctx, &a.wait)
	defer cancel()
	if a.wait > 0 {
		done, err := s.waiters.take(id.Tenant)
		if err != nil {
			return heldGrant{}, err
		}
		defer done()
		s.metrics.wait(1)
		defer s.metrics.wait(-1)
	}
	start := time.Now()
	opts := append([]distlock.Option{distlock.WithLease(a.lease), distlock.WithOwner(a.owner),
		distlock.WithBusinessID(a.businessID), distlock.WithMetadata(labels), distlock.WithWait(a.wait)}, a.extra...)
	g, err := h.AcquireToken(wctx, token, opts...)
	if ambiguous(err) {
		if a.requestID == "" { // no retry can claim the token: give the hold back if it was granted
			actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), abandonBudget)
			_ = h.ReleaseToken(actx, token)
			acancel()
		}
		err = waitEnded(wctx, err, a.wait, start)
	}
	if errors.Is(err, distlock.ErrNotAcquired) && !s.stopping.Load() {
		return heldGrant{}, connect.NewError(connect.CodeAborted, fmt.Errorf("%s %q: %s (waited %v)", op, a.key, refused, a.wait))
	}
	if err != nil {
		return heldGrant{}, s.storeError(ctx, op, a.key, sk, err)
	}
	return heldGrant{token: g.Token, fence: g.Fence, lease: g.Lease, sent: g.Sent}, nil
}

// holdOf returns the live hold of token among c's, by its label.
func (s *Server) holdOf(ctx context.Context, c holdCall, token string) (distlock.Info, bool, error) {
	held, err := c.h.holds(ctx)
	if err != nil {
		return distlock.Info{}, false, err
	}
	want := holdDigest(token)
	for _, info := range held {
		if info.Meta.Labels[labelHold] == want {
			return info, true, nil
		}
	}
	return distlock.Info{}, false, nil
}

// regrantHold answers the retry of an acquisition whose token holds info:
// it renews the hold for lease, within what is left of its group's hold
// cap, and answers the hold's own fence.
func (s *Server) regrantHold(ctx context.Context, c holdCall, lease time.Duration, token string, info distlock.Info) (heldGrant, error) {
	lease, err := s.capLease(c.sk, info, lease, time.Now())
	if err == nil {
		sent := time.Now()
		if err = c.h.RenewToken(ctx, token, lease); err == nil {
			return heldGrant{token: token, fence: info.Fence, lease: lease, sent: sent}, nil
		}
	}
	return heldGrant{}, s.storeError(ctx, c.op, c.name, c.sk, err)
}

// renewByToken renews token's hold of the tenant's name (opened with
// open) by lease, or by the lease it was acquired with if lease is nil,
// within its group's hold cap, and returns the lease given and its end.
func (s *Server) renewByToken(ctx context.Context, op, name, token string, asked *durationpb.Duration, open func(sk string) (holder, error)) (*durationpb.Duration, *timestamppb.Timestamp, error) {
	c, err := s.openHold(ctx, op, name, token, open)
	if err != nil {
		return nil, nil, err
	}
	defer c.h.Close()
	lease := time.Duration(0)
	if asked != nil {
		if lease, err = checkDuration(name, "lease", asked, distlock.MinLease, s.limits.MaxLease); err != nil {
			return nil, nil, err
		}
	}
	if lease == 0 || s.maxHold(c.sk) > 0 {
		info, ok, err := s.holdOf(ctx, c, token)
		if err == nil && !ok {
			err = distlock.ErrNotHeld
		}
		if err != nil {
			return nil, nil, s.storeError(ctx, op, name, c.sk, err)
		}
		if lease == 0 {
			lease = leaseOf(info, s.limits.DefaultLease)
		}
		if lease, err = s.capLease(c.sk, info, lease, time.Now()); err != nil {
			return nil, nil, s.storeError(ctx, op, name, c.sk, err)
		}
	}
	sent := time.Now()
	if err := c.h.RenewToken(ctx, token, lease); err != nil {
		return nil, nil, s.storeError(ctx, op, name, c.sk, err)
	}
	d, at := expiry(lease, sent)
	return d, at, nil
}

// releaseByToken frees token's hold of the tenant's name (opened with
// open).
func (s *Server) releaseByToken(ctx context.Context, op, name, token string, open func(sk string) (holder, error)) error {
	c, err := s.openHold(ctx, op, name, token, open)
	if err != nil {
		return err
	}
	defer c.h.Close()
	if err := c.h.ReleaseToken(ctx, token); err != nil {
		return s.storeError(ctx, op, name, c.sk, err)
	}
	return nil
}

// shownHolds are holds as a caller of name is shown them.
func shownHolds(name string, held []distlock.Info) []*distlockv1.Lock {
	out := make([]*distlockv1.Lock, 0, len(held))
	for _, info := range held {
		info.Held = true
		out = append(out, lockOf(name, "", info))
	}
	return out
}

// callGate lets one call at a time through per token: a retried
// acquisition waits for its first call on this server.
type callGate struct {
	mu    sync.Mutex
	calls map[string]chan struct{}
}

// enter waits until no call holds token, then holds it until the returned
// function is called; it gives up when ctx or stop ends.
func (g *callGate) enter(ctx, stop context.Context, token string) (func(), error) {
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
			}, nil
		}
		g.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-stop.Done():
			return nil, distlock.ErrClosed
		}
	}
}
