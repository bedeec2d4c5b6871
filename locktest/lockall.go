package locktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// lockAllFor is how long lockAllContention runs: LockAllDurationEnv if set
// (the 10s, for a longer run by hand), else 2s.
func lockAllFor(t *testing.T) time.Duration {
	if v := os.Getenv(LockAllDurationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", LockAllDurationEnv, v, err)
		}
		return d
	}
	return 2 * time.Second
}

// LockAllDurationEnv, if set to a duration, is how long the LockAll case
// runs its contention on each backend.
const LockAllDurationEnv = "DISTLOCK_LOCKTEST_LOCKALL"

// lockAll: Client.LockAll takes every key of a set or none. 16 goroutines
// over four clients take random subsets of 8 keys, named in random orders,
// for lockAllFor: none waits past its 30s bound (which a cycle of waits
// would make it do), and no key is ever held by two of them. A set with a
// held key and no wait takes nothing; bad sets are refused; the set's Done
// closes when one of its locks goes.
func (s *suite) lockAll(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	base := s.key(t)
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s/%d", base, i)
	}
	clients := []*distlock.Client{s.client(t), s.client(t), s.client(t), s.client(t)}

	var holders [8]atomic.Int32
	var sets, overlaps atomic.Int64
	until := time.Now().Add(lockAllFor(t))
	var wg sync.WaitGroup
	for g := range 16 {
		c := clients[g%len(clients)]
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			for n := 0; time.Now().Before(until) && !t.Failed(); n++ {
				picked := rng.Perm(len(keys))[:1+rng.IntN(4)]
				set := make([]string, len(picked))
				for i, p := range picked {
					set[i] = keys[p]
				}
				// The owner names the set's taker, so that a key held past the
				// wait shows who took it.
				ls, err := c.LockAll(ctx, set, distlock.WithWait(30*time.Second), distlock.WithOwner(fmt.Sprintf("lockall-%d/%d", g, n)))
				if err != nil {
					t.Errorf("LockAll %q: %v (a cycle of waits would end so); now %s", set, err, inspected(ctx, c, set))
					return
				}
				for _, p := range picked {
					if holders[p].Add(1) != 1 {
						overlaps.Add(1)
					}
				}
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				for _, p := range picked {
					holders[p].Add(-1)
				}
				if err := ls.Release(ctx); err != nil {
					t.Errorf("release %q: %v", set, err)
					return
				}
				sets.Add(1)
			}
		})
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("a key was held by two sets at once %d times", n)
	}
	t.Logf("%d sets taken and released", sets.Load())

	c, other := clients[0], clients[1]
	for _, bad := range [][]string{nil, {keys[0], keys[1], keys[0]}, make([]string, distlock.MaxLockAllKeys+1)} {
		if _, err := c.LockAll(ctx, bad); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("LockAll %q: %v, want ErrInvalidOption", bad, err)
		}
	}
	if _, err := c.LockAll(ctx, []string{keys[0], ""}); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Fatalf("LockAll with an empty key: %v, want ErrInvalidKey", err)
	}
	// A held key: nothing is taken, the keys before it included.
	held := mustLock(t, ctx, other, keys[5])
	if _, err := c.LockAll(ctx, []string{keys[7], keys[5], keys[2]}, distlock.WithWait(0)); !errors.Is(err, distlock.ErrNotAcquired) || !strings.Contains(err.Error(), keys[5]) {
		t.Fatalf("LockAll with %q held: %v, want ErrNotAcquired naming it", keys[5], err)
	}
	for _, k := range []string{keys[2], keys[7]} {
		l := mustLock(t, ctx, other, k, distlock.WithWait(0))
		_ = l.Release(ctx)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// One lock of the set goes: the set's Done closes, with its error.
	ls, err := c.LockAll(ctx, []string{keys[3], keys[1]})
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := ls.Fence(keys[1]); !ok || f == 0 {
		t.Fatalf("Fence of a key of the set: %d, %v", f, ok)
	}
	if _, ok := ls.Fence(keys[0]); ok {
		t.Fatal("Fence of a key outside the set")
	}
	if err := ls.Locks()[1].Release(ctx); err != nil { // keys[3]'s lock
		t.Fatal(err)
	}
	select {
	case <-ls.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the set's Done stayed open after one of its locks was released")
	}
	if err := ls.Err(); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("the set's Err: %v, want the released lock's ErrNotHeld", err)
	}
	if err := ls.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("releasing the rest: %v, want the released lock's ErrNotHeld joined", err)
	}
	if err := ls.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("releasing twice: %v, want ErrNotHeld", err)
	}
	wantFree := mustLock(t, ctx, other, keys[1], distlock.WithWait(0))
	_ = wantFree.Release(ctx)
}

// inspected says how the store sees keys: holder, fence and TTL left, for
// a failure's message.
func inspected(ctx context.Context, c *distlock.Client, keys []string) string {
	var b strings.Builder
	for _, k := range keys {
		info, err := c.Inspect(ctx, k)
		switch {
		case err != nil:
			fmt.Fprintf(&b, "[%s: %v]", k, err)
		case !info.Held:
			fmt.Fprintf(&b, "[%s: free]", k)
		default:
			fmt.Fprintf(&b, "[%s: held by %q, fence %d, TTL %v]", k, info.Meta.Owner, info.Fence, info.TTL)
		}
	}
	return b.String()
}
