package server_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// A tenant admin force-releases its own tenant's keys and nothing of
// another tenant's: it cannot release, nor list, beyond its tenant.
func TestTenantAdmin(t *testing.T) {
	e := newEnv(t, stores(t)[1], server.Limits{})
	key := keyFor(t, "k")
	acquire(t, e.api(alphaClient), &distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(time.Minute)})
	acquire(t, e.api(betaClient), &distlockv1.AcquireRequest{Key: key, Lease: durationpb.New(time.Minute)})
	admin := e.api(alphaAdmin)

	_, err := admin.ForceRelease(ctx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{Key: key, Tenant: "beta", Reason: "test"}))
	wantCode(t, "a tenant admin's release of another tenant's key", err, connect.CodePermissionDenied)
	if l := inspect(t, e.api(betaClient), key); !l.GetHeld() {
		t.Error("the other tenant's key was released")
	}
	_, err = admin.List(ctx(t), connect.NewRequest(&distlockv1.ListRequest{AllTenants: true}))
	wantCode(t, "a tenant admin's list of every tenant", err, connect.CodePermissionDenied)
	if _, err := e.srv.ForceReleaseAs(ctx(t), auth.Identity{Tenant: "alpha", Role: auth.TenantAdmin}, "beta", key, "test", 0); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("the dashboard's release of another tenant's key by a tenant admin: %v, want permission_denied", err)
	}

	res, err := admin.ForceRelease(ctx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{Key: key, Reason: "test"}))
	if err != nil || !res.Msg.GetLock().GetHeld() {
		t.Fatalf("a tenant admin's release of its own key: %v, %v", res, err)
	}
	if l := inspect(t, e.api(alphaClient), key); l.GetHeld() {
		t.Error("the tenant admin's own key is still held")
	}
	_, err = e.api(alphaClient).ForceRelease(ctx(t), connect.NewRequest(&distlockv1.ForceReleaseRequest{Key: key, Reason: "test"}))
	wantCode(t, "a client's forced release", err, connect.CodePermissionDenied)
}
