package server

import (
	"context"
	"fmt"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// What the dashboard (package dashboard) needs from the server: who a token
// is, the monitor's view of the locks, and a forced release made as the API
// makes it. See monitor.go for where the view comes from.

// Bounds of a View.
const (
	MaxViewLocks     = 500 // held locks, in (tenant, key) order; View.More counts the rest
	MaxViewContended = 20  // most contended keys
	MaxViewLosses    = 50  // most recent losses
)

// View is the locks an identity may see: its tenant's, or an admin's every
// tenant's. Its times are the server's clock.
type View struct {
	Tenant     string // the viewer's tenant
	AllTenants bool   // the viewer is an admin and sees every tenant
	// Live is true while the monitor polls the store: always, right after
	// Monitor.
	Live bool
	// Polled is when the last good poll of the store began (zero before the
	// first); PollErr is the last poll's failure, nil after a good one. The
	// locks are as of Polled, and the calls through this server since.
	Polled  time.Time
	PollErr error
	// Locks are the held locks, by tenant and key, at most MaxViewLocks;
	// More is how many more there are.
	Locks []HeldLock
	More  int
	// Contended are the keys with Acquire calls waiting at this server now,
	// or that waited within the last 5 minutes: the most waiters first, then
	// the longest total wait. At most MaxViewContended.
	Contended []Contention
	// Losses are the holds that ended against their holders' will, newest
	// first, at most MaxViewLosses: expiries seen by the monitor's polls,
	// and the forced releases and refused renewals made through this server.
	Losses []Loss
}

// HeldLock is a held lock, or a hold of a semaphore or a read-write lock,
// as the dashboard shows it: never its token.
type HeldLock struct {
	Tenant string
	Key    string // the client key (a semaphore's or read-write lock's name), without the tenant's namespace
	// Kind is what is held: a lock, an election's term, a permit, a
	// reader's or the writer's hold.
	Kind HoldKind
	// Value is a leader's value (Kind HoldLeader).
	Value string
	// Permits is a permit's semaphore's number of permits (Kind HoldPermit).
	Permits    int
	Owner      string
	BusinessID string
	Fence      uint64
	// Since is the earliest the grant can have come: the time the Acquire
	// began (its label distlock.acquired), or, when the monitor saw the key
	// appear, the poll before. Zero if unknown: a lock taken without a
	// server, held when the monitor began.
	Since time.Time
	// Expires is when the store lets the lock go unless it is renewed.
	Expires time.Time
	// Lease is the lease it was acquired with; 0 if unknown.
	Lease time.Duration
	// Waiters is the Acquire calls waiting for the key at this server.
	Waiters int
	// RenewFailing is true when a renewal through this server failed, other
	// than as not held, and none succeeded since.
	RenewFailing bool
	// Session is true for a lock of a session (kept alive by KeepAlive).
	Session bool
	// MaxHold is the cap on the hold (Config.MaxHold); 0 for none.
	MaxHold time.Duration
}

// Contention is how much Acquire calls at this server waited for a key.
type Contention struct {
	Tenant, Key string
	// Waiters is the Acquire calls waiting now.
	Waiters int
	// Waited is the calls within the last 5 minutes that asked to wait and
	// did (were granted after more than 10ms, or gave up); TotalWait and
	// MaxWait their time.
	Waited             int
	TotalWait, MaxWait time.Duration
	// GaveUp is those of them that ended without the key: the wait ran
	// out, or the caller left.
	GaveUp int
}

// LossKind is how a hold ended against its holder's will.
type LossKind string

// The kinds of loss.
const (
	LossExpired      LossKind = "expired"        // the lease ran out without a renewal
	LossForced       LossKind = "force released" // an admin's ForceRelease
	LossRenewRefused LossKind = "renew refused"  // a holder renewed a hold it no longer had
	LossMaxHold      LossKind = "max hold"       // the lease was cut to the hold cap, and ran out
)

// Loss is a hold that ended against its holder's will.
type Loss struct {
	Kind        LossKind
	Tenant, Key string
	// Owner, BusinessID and Fence are the hold's, where known (a refused
	// renewal knows none of them).
	Owner, BusinessID string
	Fence             uint64
	At                time.Time
	// Reason is a forced release's reason, or why a renewal was refused
	// (for LossMaxHold, the cap).
	Reason string
	// By is the tenant of the admin who forced a release.
	By string
}

// Identify returns the identity of a bearer token as the API's guard sees
// it: false for an unknown token. Under InsecureNoAuth every token, and
// none, is tenant "default" with role admin.
func (s *Server) Identify(bearer string) (auth.Identity, bool) {
	id, err := s.identify("Bearer " + bearer)
	return id, err == nil
}

// Monitor returns the view of the locks that id may see, those whose keys
// begin with prefix (for an admin, "tenant/key" may match too), and a
// channel closed at the monitor's next change. The first call starts the
// monitor's poller, which lists every tenant's keys twice a second while
// views are asked for, and stops five minutes after the last, or at
// Shutdown.
func (s *Server) Monitor(id auth.Identity, prefix string) (View, <-chan struct{}) {
	changed := s.mon.touch(s)
	s.mon.mu.Lock()
	defer s.mon.mu.Unlock()
	return s.mon.viewLocked(id.Tenant, id.Role.Allows(auth.Administer), prefix, time.Now()), changed
}

// checkTarget makes the checks of a dashboard's call on tenant's key as
// id: the server not stopping, a role that may force, the tenant's rate, a
// valid key and tenant that id may reach, and, with a fence other than 0,
// a hold of that fence (FailedPrecondition otherwise). method names the
// call, op the operation in errors.
func (s *Server) checkTarget(ctx context.Context, id auth.Identity, method, op, tenant, key string, fence uint64) error {
	switch {
	case s.stopping.Load():
		return errShutdown()
	case !id.Role.Allows(auth.Force):
		return connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("%s: role %s of tenant %q may not %s", method, id.Role, id.Tenant, auth.Force))
	}
	if err := s.checkRate(method, id.Tenant); err != nil {
		return err
	}
	if err := s.limits.checkKey(key); err != nil {
		return err
	}
	if tenant == "" {
		tenant = id.Tenant
	}
	if !auth.ValidTenant(tenant) {
		return invalid("%s %q: tenant %q is not a tenant name", op, key, short(tenant))
	}
	if err := mayForce(id, tenant); err != nil {
		return err
	}
	if fence == 0 {
		return nil
	}
	sk := storeKey(tenant, key)
	info, err := s.store.of(sk).Inspect(ctx, sk)
	if err != nil {
		return s.storeError(ctx, op, key, sk, err)
	}
	if !info.Held || info.Fence != fence {
		return connect.NewError(connect.CodeFailedPrecondition,
			fmt.Errorf("%s %q: the hold with fence %d has ended; nothing was done", op, key, fence))
	}
	return nil
}

// Stopping returns a channel closed when Shutdown begins: a dashboard's
// event streams end then, as Watch streams do.
func (s *Server) Stopping() <-chan struct{} { return s.stopCtx.Done() }

// RequestReleaseAs asks the holder of tenant's key to release it, as id,
// with the checks of a forced release (a role that may force, within its
// tenant's rate; tenant is id's own unless id administers every tenant)
// and RequestRelease's work: the audit record, the event to watchers, the
// answer to the holder's next renewal, and an access-log record and
// metrics as a RequestRelease call. A fence other than 0 is the hold the
// caller means: if the key is held with another, nobody is asked and the
// error is FailedPrecondition. It reports whether a holder was asked; a
// free key is not an error.
func (s *Server) RequestReleaseAs(ctx context.Context, id auth.Identity, tenant, key, reason string, fence uint64) (asked bool, err error) {
	c := newCall("RequestRelease")
	c.id = id
	c.key = short(key)
	defer func() {
		c.code = codeOf(err)
		s.finish(c)
	}()
	if err := s.checkTarget(ctx, id, "RequestRelease", "request release", tenant, key, fence); err != nil {
		return false, err
	}
	if tenant == "" {
		tenant = id.Tenant
	}
	info, err := s.askRelease(withCall(ctx, c), id.Tenant, tenant, key, reason)
	return info.Held, err
}

// ForceReleaseAs force-releases tenant's key as id, through the
// ForceRelease RPC's own handler: the same checks (an admin, within its
// tenant's rate, a reason), the same audit record, the same events to
// watchers, and an access-log record and metrics as a ForceRelease call.
// A fence other than 0 is the hold the caller means: if the key is held
// with another, nothing is released and the error is FailedPrecondition
// (a hold that changes between that check and the release is released).
// It reports whether a hold was released; a free key is not an error.
func (s *Server) ForceReleaseAs(ctx context.Context, id auth.Identity, tenant, key, reason string, fence uint64) (released bool, err error) {
	c := newCall("ForceRelease")
	c.id = id
	c.key = short(key)
	defer func() {
		c.code = codeOf(err)
		s.finish(c)
	}()
	if err := s.checkTarget(ctx, id, "ForceRelease", "force release", tenant, key, fence); err != nil {
		return false, err
	}
	if tenant == "" {
		tenant = id.Tenant
	}
	res, err := (&service{s: s}).ForceRelease(withCall(ctx, c), connect.NewRequest(&distlockv1.ForceReleaseRequest{
		Key: key, Tenant: tenant, Reason: reason,
	}))
	if err != nil {
		return false, err
	}
	return res.Msg.GetLock().GetHeld(), nil
}
