package pglock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
)

// collidingA and collidingB are keys of two tenants of the lock service
// whose FNV-1a 64-bit hashes are equal: a birthday search over keys of the
// form tenants/<tenant>/<16 hex digits> finds such a pair in about 2^32
// hashes, so any caller who chooses keys can make one. A key's lock id must
// not let one of them reach the other.
const (
	collidingA = "tenants/alpha/167056e78c67eef2"
	collidingB = "tenants/beta/e6b31051d4e37d85"
)

// TestConstructedCollision holds tenant alpha's key and checks that tenant
// beta's key, built to collide with it, is neither reported held nor
// blocked.
func TestConstructedCollision(t *testing.T) {
	if a, b := pglock.KeyID(collidingA), pglock.KeyID(collidingB); a == b {
		t.Errorf("KeyID(%q) = KeyID(%q) = %#x: one tenant's key reaches the other's lock", collidingA, collidingB, uint64(a))
	}
	s := testserver.Postgres(t)
	ctx := testContext(t, time.Minute)
	alpha := distlock.New(newBackend(t, newPool(t, s, 2)))
	beta := distlock.New(newBackend(t, newPool(t, s, 2)))
	defer alpha.Close()
	defer beta.Close()

	la, err := alpha.TryLock(ctx, collidingA)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	info, err := beta.Inspect(ctx, collidingB)
	if err != nil {
		t.Fatal(err)
	}
	if info.Held {
		t.Errorf("Inspect(%q) says held while only %q is", collidingB, collidingA)
	}
	lb, err := beta.TryLock(ctx, collidingB)
	if err != nil {
		t.Fatalf("TryLock(%q) while %q is held: %v", collidingB, collidingA, err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
