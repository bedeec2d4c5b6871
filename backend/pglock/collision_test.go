package pglock_test

import (
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
)

// collidingA and collidingB are keys of two tenants of the lock service
// whose FNV-1a 64-bit hashes are equal, found by a birthday search over keys
// of the form tenants/<tenant>/<16 hex digits> (about 2^32 hashes). Such a
// search finds a pair under any 64-bit id when one searcher picks both
// keys; what makes FNV-1a unfit is that every step of it can be inverted, so
// a key matching a given key's id (another tenant's) can be built by a
// meet-in-the-middle search of about 2^32 steps each way, where SHA-256
// takes about 2^64. The pair stands for that case: one tenant's key must not
// reach the other's lock. KeyID (SHA-256) gives them different ids; on a
// database that still records fnv1a they share one (LegacyKeyID).
const (
	collidingA = "tenants/alpha/167056e78c67eef2"
	collidingB = "tenants/beta/e6b31051d4e37d85"
)

// TestConstructedCollision holds tenant alpha's key and checks that tenant
// beta's key, built to collide with it, is neither reported held nor
// blocked.
func TestConstructedCollision(t *testing.T) {
	if a, b := pglock.LegacyKeyID(collidingA), pglock.LegacyKeyID(collidingB); a != b {
		t.Fatalf("LegacyKeyID %#x != %#x: the keys do not collide under FNV-1a, so the test proves nothing", uint64(a), uint64(b))
	}
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
