package etcdlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/internal/testserver"
)

// TestClusterLeaderKilled holds a lock on a 3-member cluster with waiters
// queued behind it, kills the leader, and checks that there is never more
// than one holder, that fences increase, and that the waiters are granted in
// the order they queued. The clients are opened from an etcd:// URL naming
// all three members.
func TestClusterLeaderKilled(t *testing.T) {
	const waiters = 4
	members := testserver.EtcdCluster(t, 3)
	var eps, addrs []string
	for _, m := range members {
		eps = append(eps, testserver.EtcdEndpoint(m))
		addrs = append(addrs, m.Addr())
	}
	cli := admin(t, eps)
	prefix := uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func() *distlock.Client {
		c, err := distlock.Open(ctx, "etcd://"+strings.Join(addrs, ",")+"/"+prefix)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	const key = "failover"
	var inside atomic.Int32
	holder := open()
	hl, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	inside.Add(1)

	var (
		mu     sync.Mutex
		order  []int
		fences = []uint64{hl.Fence()}
		wg     sync.WaitGroup
		errs   = make(chan error, waiters)
	)
	for i := range waiters {
		c := open()
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, key, distlock.WithWait(time.Minute))
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			if inside.Add(1) != 1 {
				errs <- fmt.Errorf("waiter %d granted while another holder was inside", i)
			}
			mu.Lock()
			order = append(order, i)
			fences = append(fences, l.Fence())
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			inside.Add(-1)
			if err := l.Release(ctx); err != nil {
				errs <- fmt.Errorf("waiter %d: release: %w", i, err)
			}
		}()
		for deadline := time.Now().Add(10 * time.Second); len(entries(t, cli, prefix, key)) < i+2; {
			if time.Now().After(deadline) {
				select {
				case err := <-errs:
					t.Fatalf("waiter %d never queued: %v", i, err)
				default:
					t.Fatalf("waiter %d never queued: %q", i, entries(t, cli, prefix, key))
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	leader := -1
	for i, ep := range eps {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			t.Fatal(err)
		}
		if st.Leader == st.Header.MemberId {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no member reports itself leader")
	}
	members[leader].Kill()
	time.Sleep(time.Second) // an election, while the holder still holds
	if err := hl.Err(); err != nil {
		t.Fatalf("holder lost the lock over a leader change: %v", err)
	}
	inside.Add(-1)
	if err := hl.Release(ctx); err != nil {
		t.Fatalf("holder release after the leader died: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(order, want) {
		t.Errorf("grant order %v, want arrival order %v", order, want)
	}
	if !slices.IsSorted(fences) || len(slices.Compact(slices.Clone(fences))) != len(fences) {
		t.Errorf("fences %v do not strictly increase", fences)
	}
	t.Logf("killed leader m%d; grants in order %v with fences %v", leader, order, fences)
}

// A client of a 3-member cluster reads its own grants: right after a
// grant by token, Inspect reports the key held and RenewToken renews it,
// whichever member each request reaches, with 32 callers at once and in
// both key layouts. The lock service opens a session this way and looks it
// up at the session's first Acquire.
func TestClusterReadsItsOwnGrants(t *testing.T) {
	members := testserver.EtcdCluster(t, 3)
	var addrs []string
	for _, m := range members {
		addrs = append(addrs, m.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, layout := range []string{"escaped", "ordered"} {
		t.Run(layout, func(t *testing.T) {
			c, err := distlock.Open(ctx, "etcd://"+strings.Join(addrs, ",")+"/"+uniquePrefix(t)+"?key_layout="+layout)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var wg sync.WaitGroup
			for w := range 32 {
				wg.Go(func() {
					for i := w; i < 1000 && !t.Failed(); i += 32 {
						key, token := fmt.Sprintf("own/%04d", i), fmt.Sprintf("token-of-grant-%04d", i)
						if _, err := c.AcquireToken(ctx, key, token, distlock.WithLease(30*time.Second), distlock.WithOwner("o")); err != nil {
							t.Error(err)
							return
						}
						info, err := c.Inspect(ctx, key)
						if err != nil || !info.Held {
							t.Errorf("grant %d: Inspect right after it: %+v, %v; want held", i, info, err)
							return
						}
						if err := c.RenewToken(ctx, key, token, 30*time.Second); err != nil {
							t.Errorf("grant %d: RenewToken right after it: %v", i, err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}
