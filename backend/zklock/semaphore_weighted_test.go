package zklock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// TestPermitIntentExpires: a request for both permits of two, refused
// beside a holder, leaves its intent and no node of its attempt; the
// intent keeps a single permit out though one is free, shows in no
// Inspect, and stops keeping it out once nobody rewrote it for
// driver.WriteIntentTTL, deleted by the waiter it kept out. The
// semaphore is marked as taking weighted holds, and its permits named with
// their counts.
func TestPermitIntentExpires(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	waiter, c := dial(t, srv.Addr(), root), distlock.New(dial(t, srv.Addr(), root))
	defer waiter.Close()
	defer c.Close()
	const name = "weighted"
	sem, err := c.Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	one, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := driver.AcquireRequest{Key: name, Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute, Intent: "hung-request", Permits: 2}
	for range 3 {
		if _, err := waiter.AcquirePermits(ctx, req, 2); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("both permits beside a holder: %v, want ErrNotAcquired", err)
		}
	}
	recorded := time.Now()
	sp := semPathOf(root, name)
	got := children(t, conn, sp)
	if len(got) != 3 || got[0] != "limit" || !strings.HasPrefix(got[1], "lock-.") || strings.Contains(got[2], ".") {
		t.Fatalf("the semaphore's children: %q, want the limit, one intent and the holder's node", got)
	}
	if m := children(t, conn, sp+"/limit"); len(m) != 1 {
		t.Errorf("the limit node's children: %q, want the mark of weighted holds", m)
	}
	if info, err := sem.Inspect(ctx); err != nil || len(info.Held) != 1 || info.Held[0].Fence != one.Fence() {
		t.Fatalf("Inspect: %+v, %v; want the one holder", info, err)
	}
	if _, err := sem.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("a single permit behind an intent, one free: %v, want ErrNotAcquired", err)
	}
	two, err := sem.Acquire(ctx, distlock.WithWait(3*driver.WriteIntentTTL))
	if err != nil {
		t.Fatalf("a single permit behind an intent nobody renews: %v", err)
	}
	if took := time.Since(recorded); took < driver.WriteIntentTTL {
		t.Errorf("the intent stopped keeping a permit out after %v, before its %v", took, driver.WriteIntentTTL)
	}
	for _, l := range []*distlock.Lock{one, two} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l, err := sem.AcquireN(ctx, 2, distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if got := children(t, conn, sp); len(got) != 2 || !strings.Contains(got[1], ".2-") {
		t.Errorf("the semaphore's children under a hold of 2: %q, want the limit and a node named with its count", got)
	}
	info, err := sem.Inspect(ctx)
	if err != nil || len(info.Held) != 1 || info.Held[0].Permits != 2 {
		t.Errorf("Inspect of a hold of 2: %+v, %v", info, err)
	}
	if err := l.Extend(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	if info, err := sem.Inspect(ctx); err != nil || len(info.Held) != 1 || info.Held[0].Permits != 2 {
		t.Errorf("Inspect of a hold of 2 after its renewal: %+v, %v", info, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
