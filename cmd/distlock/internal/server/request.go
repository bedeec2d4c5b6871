package server

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// RequestRelease asks the holder of a key of the caller's tenant to release
// it. The store tells holders that follow it (a Go program on the same
// store); this server tells its Watch streams at once, with a
// RELEASE_REQUESTED event, and the holder's next Renew through it, with
// release_requested. It records who asked in the audit log at INFO. A free
// key is not an error: the answer's lock is not held.
func (h *service) RequestRelease(ctx context.Context, req *connect.Request[distlockv1.RequestReleaseRequest]) (*connect.Response[distlockv1.RequestReleaseResponse], error) {
	c := callOf(ctx)
	key := req.Msg.GetKey()
	noteKey(ctx, short(key))
	info, err := h.s.askRelease(ctx, c.id.Tenant, c.id.Tenant, key, req.Msg.GetReason())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&distlockv1.RequestReleaseResponse{Lock: lockOf(key, c.id.Tenant, info)}), nil
}

// askRelease asks the holder of tenant's key to release it for a caller of
// byTenant (RequestRelease's work) and returns the hold it asked; Held is
// false if the key was free.
func (s *Server) askRelease(ctx context.Context, byTenant, tenant, key, reason string) (distlock.Info, error) {
	if err := s.limits.checkKey(key); err != nil {
		return distlock.Info{}, err
	}
	switch {
	case strings.TrimSpace(reason) == "":
		return distlock.Info{}, invalid("request release %q: a reason is required, for the holder", key)
	case len(reason) > distlock.MaxRequestReason:
		return distlock.Info{}, invalid("request release %q: reason has %d bytes, the maximum is %d", key, len(reason), distlock.MaxRequestReason)
	case !utf8.ValidString(reason):
		return distlock.Info{}, invalid("request release %q: reason is not UTF-8", key)
	}
	sk := storeKey(tenant, key)
	info, err := s.store.of(sk).RequestRelease(ctx, sk, reason)
	if errors.Is(err, errors.ErrUnsupported) { // the store cannot tell: this server still can
		info, err = s.store.of(sk).Inspect(ctx, sk)
		if err == nil && !info.Held {
			err = distlock.ErrNotHeld
		}
	}
	switch {
	case errors.Is(err, distlock.ErrNotHeld):
		info = distlock.Info{}
	case err != nil:
		return distlock.Info{}, s.storeError(ctx, "request release", key, sk, err)
	}
	info.Key = sk
	s.log.LogAttrs(ctx, slog.LevelInfo, "release requested",
		slog.String("tenant", byTenant),
		slog.String("target_tenant", tenant),
		slog.String("key", key),
		slog.String("reason", reason),
		slog.Bool("held", info.Held),
		slog.String("owner", info.Meta.Owner),
		slog.Uint64("fence", info.Fence),
	)
	if info.Held {
		s.requests.add(sk, info, reason, time.Now())
		s.events.publish(tenant, change{typ: distlockv1.Event_TYPE_RELEASE_REQUESTED, at: time.Now(), info: info, reason: reason})
	}
	return info, nil
}

// maxPendingRequests bounds the requests to release a server keeps for the
// holders' renewals, and maxPendingRequestsPerTenant one tenant's share:
// past its share, a tenant's oldest request is dropped; past the bound, a
// new request is not kept. Either way the holder is still told by the
// Watch stream, and one tenant's requests never push out another's.
const (
	maxPendingRequests          = 65536
	maxPendingRequestsPerTenant = 4096
)

// pendingRequests are the requests to release made through this server,
// by tenant and store key, until their holder's renewal is told, the hold
// ends, or its lease as seen at the request runs out.
type pendingRequests struct {
	mu       sync.Mutex
	byTenant map[string]*tenantRequests
	count    int // requests kept, of every tenant
	added    uint64
}

// tenantRequests are one tenant's pending requests, and the order they
// came in, for dropping the oldest: an entry of order whose request was
// since told, dropped or made again is skipped.
type tenantRequests struct {
	byKey map[string]pendingRequest
	order []orderedRequest
}

// orderedRequest is the store key of a request and its number.
type orderedRequest struct {
	sk string
	n  uint64
}

// pendingRequest is a request to release the hold of fence.
type pendingRequest struct {
	fence  uint64
	reason string
	until  time.Time
	n      uint64 // numbers the requests in the order they came
}

// add records a request to release the hold info describes.
func (p *pendingRequests) add(sk string, info distlock.Info, reason string, now time.Time) {
	tenant, _, _ := splitStoreKey(sk)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byTenant == nil {
		p.byTenant = make(map[string]*tenantRequests)
	}
	t := p.byTenant[tenant]
	if t == nil {
		t = &tenantRequests{byKey: make(map[string]pendingRequest)}
		p.byTenant[tenant] = t
	}
	if _, again := t.byKey[sk]; !again {
		if len(t.byKey) >= maxPendingRequestsPerTenant {
			p.dropOldest(t)
		}
		if p.count >= maxPendingRequests {
			return
		}
		p.count++
	}
	p.added++
	t.byKey[sk] = pendingRequest{fence: info.Fence, reason: reason, until: now.Add(max(info.TTL, time.Minute)), n: p.added}
	t.order = append(t.order, orderedRequest{sk, p.added})
	if len(t.order) > 2*len(t.byKey)+64 { // mostly skipped entries: compact
		live := t.order[:0]
		for _, o := range t.order {
			if r, ok := t.byKey[o.sk]; ok && r.n == o.n {
				live = append(live, o)
			}
		}
		t.order = live
	}
}

// dropOldest drops t's oldest request. p.mu is held.
func (p *pendingRequests) dropOldest(t *tenantRequests) {
	for len(t.order) > 0 {
		o := t.order[0]
		t.order = t.order[1:]
		if r, ok := t.byKey[o.sk]; ok && r.n == o.n {
			delete(t.byKey, o.sk)
			p.count--
			return
		}
	}
}

// forget drops sk's request from t. p.mu is held.
func (p *pendingRequests) forget(tenant string, t *tenantRequests, sk string) {
	delete(t.byKey, sk)
	p.count--
	if len(t.byKey) == 0 {
		delete(p.byTenant, tenant)
	}
}

// pending returns the request to release sk's holder, if one is kept.
func (p *pendingRequests) pending(sk string, now time.Time) (pendingRequest, bool) {
	tenant, _, _ := splitStoreKey(sk)
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.byTenant[tenant]
	if t == nil {
		return pendingRequest{}, false
	}
	r, ok := t.byKey[sk]
	if ok && !now.Before(r.until) {
		p.forget(tenant, t, sk)
		return pendingRequest{}, false
	}
	return r, ok
}

// told forgets sk's request once its holder was told or its hold ended.
func (p *pendingRequests) told(sk string, fence uint64) {
	tenant, _, _ := splitStoreKey(sk)
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.byTenant[tenant]; t != nil {
		if r, ok := t.byKey[sk]; ok && r.fence == fence {
			p.forget(tenant, t, sk)
		}
	}
}

// kept returns how many of tenant's requests are kept.
func (p *pendingRequests) kept(tenant string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if t := p.byTenant[tenant]; t != nil {
		return len(t.byKey)
	}
	return 0
}

// releaseRequested returns the reason of a request to release sk, held by
// the hold of fence (0: read it from the store), for a renewal of it that
// the store confirmed; "" if there is none. It reads the store only when a
// request for sk is pending.
func (s *Server) releaseRequested(ctx context.Context, sk string, fence uint64) string {
	r, ok := s.requests.pending(sk, time.Now())
	if !ok {
		return ""
	}
	if fence == 0 {
		info, err := s.store.of(sk).Inspect(ctx, sk)
		if err != nil {
			return "" // the next renewal asks again
		}
		fence = info.Fence
	}
	s.requests.told(sk, r.fence)
	if fence != r.fence {
		return "" // a later hold: not asked
	}
	return r.reason
}
