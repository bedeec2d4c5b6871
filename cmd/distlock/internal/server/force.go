package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// ForceRelease frees a key of any tenant whoever holds it (admins only: the
// guard checks), records it in the audit log at WARN, and tells this
// server's watchers at once. A free key is not an error: the answer's lock
// is not held.
func (h *service) ForceRelease(ctx context.Context, req *connect.Request[distlockv1.ForceReleaseRequest]) (*connect.Response[distlockv1.ForceReleaseResponse], error) {
	s := h.s
	c := callOf(ctx)
	key, reason, tenant := req.Msg.GetKey(), strings.TrimSpace(req.Msg.GetReason()), req.Msg.GetTenant()
	noteKey(ctx, short(key))
	if err := s.limits.checkKey(key); err != nil {
		return nil, err
	}
	switch {
	case reason == "":
		return nil, invalid("force release %q: a reason is required, for the audit log", key)
	case len(reason) > maxReasonLen:
		return nil, invalid("force release %q: reason has %d bytes, the maximum is %d", key, len(reason), maxReasonLen)
	case tenant == "":
		tenant = c.id.Tenant
	case !auth.ValidTenant(tenant):
		return nil, invalid("force release %q: tenant %q is not a tenant name", key, short(tenant))
	}
	if err := mayForce(c.id, tenant); err != nil {
		return nil, err
	}
	sk := storeKey(tenant, key)
	done := s.polls.local(tenant, sk) // until its event is out
	defer done()
	info, err := s.forceRelease(ctx, sk, reason)
	switch {
	case errors.Is(err, distlock.ErrNotHeld):
		info = distlock.Info{}
	case err != nil:
		return nil, s.storeError(ctx, "force release", key, sk, err)
	default:
		info.Held = true // what it was until now
	}
	info.Key = sk
	s.log.LogAttrs(ctx, slog.LevelWarn, "force release",
		slog.String("tenant", c.id.Tenant),
		slog.String("target_tenant", tenant),
		slog.String("key", key),
		slog.String("reason", reason),
		slog.Bool("held", info.Held),
		slog.String("owner", info.Meta.Owner),
		slog.Uint64("fence", info.Fence),
	)
	if info.Held {
		s.events.publish(tenant, change{typ: distlockv1.Event_TYPE_FORCE_RELEASED, at: time.Now(), info: info})
	}
	return connect.NewResponse(&distlockv1.ForceReleaseResponse{Lock: lockOf(key, tenant, info)}), nil
}

// mayForce refuses a force release of tenant's keys by id unless id's role
// administers every tenant or tenant is id's own.
func mayForce(id auth.Identity, tenant string) error {
	if tenant == id.Tenant || id.Role.Allows(auth.Administer) {
		return nil
	}
	return connect.NewError(connect.CodePermissionDenied,
		fmt.Errorf("ForceRelease: role %s of tenant %q may force-release only its own tenant's keys, not tenant %q's", id.Role, id.Tenant, tenant))
}
