package locktest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
)

// acquireAll runs the contract of driver.MultiAcquirer, for backends that
// claim it. The others take a set key by key, which the LockAll case
// holds to the same promises.
func (s *suite) acquireAll(t *testing.T) {
	probe := s.h.NewBackend(t)
	m, claimed := probe.(driver.MultiAcquirer)
	together := claimed && m.AcquiresTogether([]string{"a", "b"})
	_ = probe.Close()
	switch {
	case !claimed:
		t.Skip("the backend takes a set key by key (no driver.MultiAcquirer)")
	case !together:
		t.Skip("the store, as deployed, takes a set key by key (AcquiresTogether is false)")
	}
	for _, tc := range []subtest{
		{"AllOrNone", s.acquireAllOrNone},
		{"EachKeyItsOwnHold", s.acquireAllOwnHolds},
		{"RepeatSameTokens", s.acquireAllRepeat},
		{"BadSets", s.acquireAllBad},
		{"LockAllInOneRequest", s.lockAllOneRequest},
	} {
		t.Run(tc.name, tc.fn)
	}
}

// multiAcquirer returns a new backend of the store, as a MultiAcquirer.
func (s *suite) multiAcquirer(t *testing.T) (driver.Backend, driver.MultiAcquirer) {
	b := s.h.NewBackend(t)
	t.Cleanup(func() { _ = b.Close() })
	return b, b.(driver.MultiAcquirer)
}

// setRequests returns requests for n keys under base, each with a token of
// its own and ttl.
func (s *suite) setRequests(base string, n int, ttl time.Duration) []driver.AcquireRequest {
	reqs := make([]driver.AcquireRequest, n)
	for i := range reqs {
		reqs[i] = driver.AcquireRequest{Key: fmt.Sprintf("%s/%d", base, i), Token: fmt.Sprintf("%016x%016x", time.Now().UnixNano(), s.seq.Add(1)), TTL: ttl}
	}
	return reqs
}

// requireFree fails t unless none of reqs' keys is held.
func requireFree(t *testing.T, ctx context.Context, b driver.Backend, reqs []driver.AcquireRequest, why string) {
	t.Helper()
	for _, r := range reqs {
		info, err := b.Inspect(ctx, r.Key)
		if err != nil {
			t.Fatal(err)
		}
		if info.Held {
			t.Fatalf("%s: %q is held", why, r.Key)
		}
	}
}

// A set with one key held elsewhere takes none, and names that key; once
// it is free the whole set is taken, each key with a fence above the ones
// before.
func (s *suite) acquireAllOrNone(t *testing.T) {
	ctx := testContext(t, time.Minute)
	b, m := s.multiAcquirer(t)
	other := s.h.NewBackend(t)
	defer other.Close()
	reqs := s.setRequests(s.key(t), 4, 30*time.Second)
	elsewhere := driver.AcquireRequest{Key: reqs[2].Key, Token: "elsewhere" + reqs[2].Token, TTL: 30 * time.Second}
	g, err := other.Acquire(ctx, elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.AcquireAll(ctx, reqs)
	var held *driver.HeldError
	if !errors.As(err, &held) || held.Key != reqs[2].Key || !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatalf("a set with %q held: %v, want a *HeldError naming it, matching ErrNotAcquired", reqs[2].Key, err)
	}
	requireFree(t, ctx, b, slices.Delete(slices.Clone(reqs), 2, 3), "after a refused set")
	if err := other.Release(ctx, elsewhere.Key, elsewhere.Token); err != nil {
		t.Fatal(err)
	}
	grants, err := m.AcquireAll(ctx, reqs)
	if err != nil {
		t.Fatalf("the set once free: %v", err)
	}
	if len(grants) != len(reqs) {
		t.Fatalf("%d grants for %d keys", len(grants), len(reqs))
	}
	if grants[2].Fence <= g.Fence {
		t.Errorf("fence %d of %q, not above its last grant's %d", grants[2].Fence, reqs[2].Key, g.Fence)
	}
	for i, r := range reqs {
		if _, err := other.Acquire(ctx, driver.AcquireRequest{Key: r.Key, Token: "late" + r.Token, TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("%q of the set taken by another token: %v", r.Key, err)
		}
		if grants[i].Fence == 0 {
			t.Errorf("%q granted fence 0", r.Key)
		}
	}
}

// Each key of a set is a hold of its own: renewed, released and expiring
// alone, as Acquire's grants are.
func (s *suite) acquireAllOwnHolds(t *testing.T) {
	ctx := testContext(t, time.Minute)
	b, m := s.multiAcquirer(t)
	reqs := s.setRequests(s.key(t), 3, 30*time.Second)
	reqs[0].TTL = time.Second
	reqs[1].Meta = driver.Meta{Owner: "set-owner", Labels: map[string]string{"k": "v"}}
	if _, err := m.AcquireAll(ctx, reqs); err != nil {
		t.Fatal(err)
	}
	if err := b.Release(ctx, reqs[2].Key, reqs[2].Token); err != nil {
		t.Fatalf("releasing one key of the set: %v", err)
	}
	if err := b.Renew(ctx, reqs[1].Key, reqs[1].Token, 30*time.Second); err != nil {
		t.Fatalf("renewing one key of the set: %v", err)
	}
	info, err := b.Inspect(ctx, reqs[1].Key)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Meta.Owner != "set-owner" || info.Meta.Labels["k"] != "v" {
		t.Fatalf("Inspect of a key of the set: %+v, want it held with its metadata", info)
	}
	if err := b.Renew(ctx, reqs[2].Key, reqs[2].Token, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("renewing the released key: %v, want ErrNotHeld", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := b.Inspect(ctx, reqs[0].Key)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key of a 1s time to live still held after 10s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if info, err := b.Inspect(ctx, reqs[1].Key); err != nil || !info.Held {
		t.Fatalf("a key of 30s lost with its set's key of 1s: %+v, %v", info, err)
	}
	if err := b.Release(ctx, reqs[1].Key, reqs[1].Token); err != nil {
		t.Fatal(err)
	}
}

// A retry of a set by the same tokens, its first reply lost, is granted
// again with the same fences, or refused; it takes nothing from anyone.
func (s *suite) acquireAllRepeat(t *testing.T) {
	ctx := testContext(t, time.Minute)
	b, m := s.multiAcquirer(t)
	reqs := s.setRequests(s.key(t), 3, 30*time.Second)
	first, err := m.AcquireAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := m.AcquireAll(ctx, reqs)
	switch {
	case errors.Is(err, driver.ErrNotAcquired):
	case err != nil:
		t.Fatalf("the set again: %v", err)
	default:
		for i := range reqs {
			if again[i].Fence != first[i].Fence {
				t.Fatalf("%q granted again with fence %d, want %d", reqs[i].Key, again[i].Fence, first[i].Fence)
			}
		}
	}
	for _, r := range reqs {
		if err := b.Release(ctx, r.Key, r.Token); err != nil {
			t.Fatalf("release %q after the repeat: %v", r.Key, err)
		}
	}
}

// Bad sets are refused as invalid, and take nothing.
func (s *suite) acquireAllBad(t *testing.T) {
	ctx := testContext(t, time.Minute)
	b, m := s.multiAcquirer(t)
	base := s.key(t)
	good := s.setRequests(base, 3, 30*time.Second)
	twice := slices.Clone(good)
	twice[2].Key = twice[0].Key
	noToken := slices.Clone(good)
	noToken[1].Token = ""
	badKey := slices.Clone(good)
	badKey[1].Key = "bad\x00key"
	for _, bad := range []struct {
		name string
		reqs []driver.AcquireRequest
		want error
	}{
		{"one key", good[:1], driver.ErrInvalidOption},
		{"too many keys", s.setRequests(base+"/many", driver.MaxAcquireAll+1, time.Minute), driver.ErrInvalidOption},
		{"a key twice", twice, driver.ErrInvalidOption},
		{"no token", noToken, driver.ErrInvalidOption},
		{"an invalid key", badKey, driver.ErrInvalidKey},
	} {
		if _, err := m.AcquireAll(ctx, bad.reqs); !errors.Is(err, bad.want) {
			t.Errorf("%s: %v, want %v", bad.name, err, bad.want)
		}
	}
	requireFree(t, ctx, b, good, "after the bad sets")
}

// calls counts the store calls a client makes, by operation.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) AcquireStarted(ctx context.Context, _ observe.Event) context.Context { return ctx }

func (c *calls) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.StoreCall {
		c.mu.Lock()
		c.n[e.Op]++
		c.mu.Unlock()
	}
}

// Client.LockAll of free keys on a MultiAcquirer is one store request.
func (s *suite) lockAllOneRequest(t *testing.T) {
	ctx := testContext(t, time.Minute)
	seen := &calls{n: map[string]int{}}
	c := s.client(t, distlock.WithObserver(seen))
	base := s.key(t)
	set, err := c.LockAll(ctx, []string{base + "/c", base + "/a", base + "/b"})
	if err != nil {
		t.Fatal(err)
	}
	seen.mu.Lock()
	n := maps.Clone(seen.n)
	seen.mu.Unlock()
	if n["acquire_all"] != 1 || n["acquire"] != 0 {
		t.Errorf("LockAll of 3 free keys made the store calls %v, want one acquire_all", n)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
