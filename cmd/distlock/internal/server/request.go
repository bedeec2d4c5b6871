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
	info, err := s.client.RequestRelease(ctx, sk, reason)
	if errors.Is(err, errors.ErrUnsupported) { // the store cannot tell: this server still can
		info, err = s.client.Inspect(ctx, sk)
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
// holders' renewals; past it, the oldest are dropped (their holders are
// still told by the Watch stream).
const maxPendingRequests = 65536

// pendingRequests are the requests to release made through this server,
// by store key, until their holder's renewal is told, the hold ends, or
// its lease as seen at the request runs out.
type pendingRequests struct {
	mu    sync.Mutex
	byKey map[string]pendingRequest
}

// pendingRequest is a request to release the hold of fence.
type pendingRequest struct {
	fence  uint64
	reason string
	until  time.Time
}

// add records a request to release the hold info describes.
func (p *pendingRequests) add(sk string, info distlock.Info, reason string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byKey == nil {
		p.byKey = make(map[string]pendingRequest)
	}
	if len(p.byKey) >= maxPendingRequests {
		var oldest string
		for k, r := range p.byKey {
			if !now.Before(r.until) {
				delete(p.byKey, k)
			} else if oldest == "" || r.until.Before(p.byKey[oldest].until) {
				oldest = k
			}
		}
		if len(p.byKey) >= maxPendingRequests {
			delete(p.byKey, oldest)
		}
	}
	p.byKey[sk] = pendingRequest{fence: info.Fence, reason: reason, until: now.Add(max(info.TTL, time.Minute))}
}

// pending returns the request to release sk's holder, if one is kept.
func (p *pendingRequests) pending(sk string, now time.Time) (pendingRequest, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.byKey[sk]
	if ok && !now.Before(r.until) {
		delete(p.byKey, sk)
		return pendingRequest{}, false
	}
	return r, ok
}

// told forgets sk's request once its holder was told or its hold ended.
func (p *pendingRequests) told(sk string, fence uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.byKey[sk]; ok && r.fence == fence {
		delete(p.byKey, sk)
	}
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
		info, err := s.client.Inspect(ctx, sk)
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
