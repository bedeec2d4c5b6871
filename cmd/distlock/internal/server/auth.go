package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// procedure is what the guard knows of an RPC before reading its request.
type procedure struct {
	name   string      // the RPC's name, for metrics and logs
	action auth.Action // the least a caller's role must allow
}

// procedures maps each RPC's path to its name and action. List's all_tenants
// and ForceRelease of another tenant's key need auth.Administer too, which
// they check once they have read the request.
var procedures = map[string]procedure{
	distlockv1connect.LockServiceAcquireProcedure:              {"Acquire", auth.Write},
	distlockv1connect.LockServiceRenewProcedure:                {"Renew", auth.Write},
	distlockv1connect.LockServiceReleaseProcedure:              {"Release", auth.Write},
	distlockv1connect.LockServiceBatchProcedure:                {"Batch", auth.Write},
	distlockv1connect.LockServiceInspectProcedure:              {"Inspect", auth.Read},
	distlockv1connect.LockServiceListProcedure:                 {"List", auth.Read},
	distlockv1connect.LockServiceWatchProcedure:                {"Watch", auth.Read},
	distlockv1connect.LockServiceForceReleaseProcedure:         {"ForceRelease", auth.Force},
	distlockv1connect.LockServiceRequestReleaseProcedure:       {"RequestRelease", auth.Write},
	distlockv1connect.LockServiceOpenSessionProcedure:          {"OpenSession", auth.Write},
	distlockv1connect.LockServiceKeepAliveProcedure:            {"KeepAlive", auth.Write},
	distlockv1connect.LockServiceCloseSessionProcedure:         {"CloseSession", auth.Write},
	distlockv1connect.LockServiceAcquirePermitProcedure:        {"AcquirePermit", auth.Write},
	distlockv1connect.LockServiceRenewPermitProcedure:          {"RenewPermit", auth.Write},
	distlockv1connect.LockServiceReleasePermitProcedure:        {"ReleasePermit", auth.Write},
	distlockv1connect.LockServiceSetPermitsProcedure:           {"SetPermits", auth.Write},
	distlockv1connect.LockServiceInspectPermitsProcedure:       {"InspectPermits", auth.Read},
	distlockv1connect.LockServiceWithdrawPermitIntentProcedure: {"WithdrawPermitIntent", auth.Write},
	distlockv1connect.LockServiceAcquireRWProcedure:            {"AcquireRW", auth.Write},
	distlockv1connect.LockServiceRenewRWProcedure:              {"RenewRW", auth.Write},
	distlockv1connect.LockServiceReleaseRWProcedure:            {"ReleaseRW", auth.Write},
	distlockv1connect.LockServiceInspectRWProcedure:            {"InspectRW", auth.Read},
	distlockv1connect.LockServiceWithdrawIntentProcedure:       {"WithdrawIntent", auth.Write},
	distlockv1connect.LockServiceDowngradeRWProcedure:          {"DowngradeRW", auth.Write},
	distlockv1connect.LockServiceCampaignProcedure:             {"Campaign", auth.Write},
	distlockv1connect.LockServiceLeaderProcedure:               {"Leader", auth.Read},
	distlockv1connect.LockServiceObserveProcedure:              {"Observe", auth.Read},
	distlockv1connect.LockServiceResignProcedure:               {"Resign", auth.Write},
}

// guard admits a call to next, before its request is read: the server must
// not be shutting down (else Unavailable), the bearer token must be known
// (else Unauthenticated), its role must allow the RPC (else
// PermissionDenied), and its tenant must be within its rate (else
// ResourceExhausted). It records the call's outcome in metrics and the
// access log. Paths that are no RPC go to next unchecked, which answers 404.
func (s *Server) guard(next http.Handler) http.Handler {
	errw := connect.NewErrorWriter()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		growStack() // once, before the call goes deep
		p, ok := procedures[r.URL.Path]
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		c := newCall(p.name)
		err := s.admit(r, p, c)
		if err == nil && unaryConnect(r) {
			err = boundBody(r, s.limits.MaxRequestBytes)
		}
		var large errTooLarge
		switch {
		case errors.As(err, &large):
			c.code = connect.CodeResourceExhausted.String()
			writeTooLarge(w, r, large)
		case err != nil:
			c.code = codeOf(err)
			_ = errw.Write(w, r, err)
		default:
			if !s.insecure {
				ctx, end := context.WithCancelCause(r.Context())
				defer end(nil)
				defer s.live.add(&liveCall{id: c.id, action: p.action, end: end})()
				s.live.recheck(s.keys.Load(), c.id, p.action, end) // a reload since admit
				r = r.WithContext(ctx)
			}
			rec := &recorder{ResponseWriter: w}
			c.live = func() {
				rec.Header().Set(liveHeader, "1")
				rec.Flush()
			}
			next.ServeHTTP(rec, r.WithContext(withCall(r.Context(), c)))
			if c.code == "" { // the request failed before the interceptor: undecodable, too large
				c.code = rec.code()
			}
		}
		s.finish(c)
	})
}

// admit authenticates, authorizes and rate-limits one call, setting c.id.
func (s *Server) admit(r *http.Request, p procedure, c *call) error {
	if s.stopping.Load() {
		return errShutdown()
	}
	id, err := s.identify(r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	c.id = id
	if !id.Role.Allows(p.action) {
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s: role %s of tenant %q may not %s", p.name, id.Role, id.Tenant, p.action))
	}
	if p.name == "Batch" { // each call it carries takes the rate (runBatched)
		return nil
	}
	return s.checkRate(p.name, id.Tenant)
}

// checkRate takes one call from tenant's rate limit, and refuses it with
// RESOURCE_EXHAUSTED, naming the limit, if the tenant is over it.
func (s *Server) checkRate(op, tenant string) error {
	if s.limiters.allow(tenant) {
		return nil
	}
	return connect.NewError(connect.CodeResourceExhausted,
		fmt.Errorf("%s: tenant %q is over the rate limit of %v calls a second per tenant, bursts of %d",
			op, tenant, s.limits.RatePerTenant, s.limits.Burst))
}

// identify returns the identity of an Authorization header's bearer token.
func (s *Server) identify(header string) (auth.Identity, error) {
	if s.insecure {
		return auth.Identity{Tenant: DefaultTenant, Role: auth.Admin}, nil
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return auth.Identity{}, connect.NewError(connect.CodeUnauthenticated,
			fmt.Errorf("no bearer token: send the header Authorization: Bearer <token>"))
	}
	id, ok := s.keys.Load().Lookup(strings.TrimSpace(token))
	if !ok {
		return auth.Identity{}, connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("unknown bearer token"))
	}
	return id, nil
}
