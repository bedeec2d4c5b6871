package redlock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/fence"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/observe"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// client returns a distlock client over Redlock on addrs; the test closes it.
func client(t *testing.T, addrs []string, opts ...redlock.Option) *distlock.Client {
	t.Helper()
	c := distlock.New(open(t, addrs, "", opts...))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// holders returns the addresses of the nodes whose lock of key holds a
// token (the lock's value, without the waiters' mark).
func holders(t *testing.T, addrs []string, key string) map[string]string {
	t.Helper()
	h := make(map[string]string)
	for _, a := range addrs {
		v, err := testserver.RedisCommand(context.Background(), a, "GET", lockName(key))
		if err != nil {
			t.Fatalf("node %s: %v", a, err)
		}
		if v != "" {
			h[a] = strings.TrimSuffix(v, "\n")
		}
	}
	return h
}

// Two of five nodes dead: locks are taken, renewed, exclusive and released
// on the other three.
func TestTwoNodesDown(t *testing.T) {
	ctx := testContext(t)
	servers := nodes(t, 5)
	addrs := addrsOf(servers)
	a, b := client(t, addrs), client(t, addrs)
	servers[0].Kill()
	servers[3].Kill()
	var last uint64
	for i := range 3 {
		l, err := a.TryLock(ctx, "two-down", distlock.WithLease(2*time.Second))
		if err != nil {
			t.Fatalf("lock %d with two nodes down: %v", i, err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d not above %d", l.Fence(), last)
		}
		last = l.Fence()
		if _, err := b.TryLock(ctx, "two-down"); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("second client: %v, want ErrNotAcquired", err)
		}
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renew with two nodes down: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release with two nodes down: %v", err)
		}
	}
	alive := []string{addrs[1], addrs[2], addrs[4]}
	if h := holders(t, alive, "two-down"); len(h) != 0 {
		t.Fatalf("after release, nodes still hold the key: %v", h)
	}
}

// Three of five nodes dead: an attempt fails at once, with an error naming
// each dead node and not ErrNotAcquired (the stores failed, nobody holds
// the key); the two live nodes that granted it are released, and after the
// three come back no node holds it.
func TestThreeNodesDown(t *testing.T) {
	ctx := testContext(t)
	servers := nodes(t, 5)
	addrs := addrsOf(servers)
	c := client(t, addrs)
	dead := []int{0, 2, 4}
	for _, i := range dead {
		servers[i].Kill()
	}
	start := time.Now()
	_, err := c.TryLock(ctx, "three-down", distlock.WithLease(10*time.Second))
	took := time.Since(start)
	if err == nil || errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("lock with three of five nodes down: %v, want the nodes' failures", err)
	}
	if took > time.Second {
		t.Errorf("failing took %v, want it fast (the dead nodes refuse connections)", took)
	}
	var ne *redlock.NodeError
	if !errors.As(err, &ne) {
		t.Errorf("error %v holds no *NodeError", err)
	}
	for _, i := range dead {
		if !strings.Contains(err.Error(), "node "+addrs[i]+":") {
			t.Errorf("error does not name dead node %s: %v", addrs[i], err)
		}
	}
	for _, i := range []int{1, 3} {
		if strings.Contains(err.Error(), "node "+addrs[i]+":") {
			t.Errorf("error names live node %s: %v", addrs[i], err)
		}
	}
	// The client names the operation and the key once; each node says
	// only its address and its failure.
	if n := strings.Count(err.Error(), `"three-down"`); n != 1 {
		t.Errorf("error names the key %d times, want once: %v", n, err)
	}
	if n := strings.Count(err.Error(), "acquire"); n != 0 {
		t.Errorf("error names the backend's operation %d times, want none: %v", n, err)
	}
	t.Logf("failed after %v: %v", took.Round(time.Microsecond), err)
	if h := holders(t, []string{addrs[1], addrs[3]}, "three-down"); len(h) != 0 {
		t.Fatalf("live nodes hold a stray lock after the failed attempt: %v", h)
	}
	for _, i := range dead {
		servers[i].Start()
	}
	if h := holders(t, addrs, "three-down"); len(h) != 0 {
		t.Fatalf("after recovery, nodes hold a stray lock: %v", h)
	}
	var l *distlock.Lock
	for range 20 { // the clients reconnect on their next requests
		if l, err = c.TryLock(ctx, "three-down"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("lock after recovery: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// One node slowed past the node timeout: the other four grant the key, and
// the time waited for the slow one is taken off the validity.
func TestSlowNode(t *testing.T) {
	ctx := testContext(t)
	addrs := addrsOf(nodes(t, 5))
	proxy := faultproxy.Start(t, addrs[0])
	addrs[0] = proxy.Addr()
	const lease = 2 * time.Second // node timeout: a tenth, 200ms
	c := client(t, addrs)
	// Links made and scripts loaded before the node slows down, so that the
	// attempt below meets the slow node and nothing else.
	warm, err := c.Lock(ctx, "slow/warm", distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	proxy.SetLatency(150 * time.Millisecond) // each way: a round trip of 300ms
	start := time.Now()
	l, err := c.TryLock(ctx, "slow", distlock.WithLease(lease))
	took := time.Since(start)
	if err != nil {
		t.Fatalf("lock with one slow node: %v", err)
	}
	defer l.Release(ctx)
	if took < 200*time.Millisecond || took > time.Second {
		t.Errorf("lock took %v, want the node timeout (200ms) and not much more", took)
	}
	drift := lease/100 + 2*time.Millisecond
	left := time.Until(l.ExpiresAt())
	if left > lease-drift-took+5*time.Millisecond {
		t.Errorf("validity left %v after waiting %v, want at most lease − waited − drift = %v", left, took, lease-drift-took)
	}
	t.Logf("lock took %v; validity left at return %v of %v", took.Round(time.Millisecond), left.Round(time.Millisecond), lease)
}

// A node restarted without persistence while a lock is held can let a
// second holder in: A holds on three of five nodes (two were down), one of
// the three restarts empty, and B gets the other two and the restarted one.
// The fence still orders them: B's is higher, and A's later write is
// refused by the resource's fence check. A is told soon: the restarted
// node's tracking of A's key broke, its read finds the key gone, and A
// holds on fewer than a majority.
func TestRestartWithoutPersistence(t *testing.T) {
	ctx := testContext(t)
	servers := nodes(t, 5)
	addrs := addrsOf(servers)
	a, b := client(t, addrs), client(t, addrs)
	servers[3].Kill()
	servers[4].Kill()
	la, err := a.TryLock(ctx, "restart", distlock.WithLease(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer la.Release(ctx)
	var resource fence.Guard
	write := func(l *distlock.Lock) error {
		return resource.Check(ctx, fence.Token{Key: l.Key(), Fence: l.Fence()})
	}
	if err := write(la); err != nil {
		t.Fatal(err)
	}
	servers[3].Start()
	servers[4].Start()
	if _, err := b.TryLock(ctx, "restart"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("B while A holds three of five: %v, want ErrNotAcquired", err)
	}
	servers[2].Restart() // no persistence: A's lock on it is gone
	var lb *distlock.Lock
	for range 20 { // the clients reconnect to the restarted node on their next requests
		if lb, err = b.TryLock(ctx, "restart"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("B after a node of A's majority restarted empty: %v (holders %v); Redlock would have kept it out", err, holders(t, addrs, "restart"))
	}
	defer lb.Release(ctx)
	select {
	case <-la.Done():
		// The restarted node lost A's entry, and B's retries take the key
		// there at once: A reads it gone or already B's, whichever it sees
		// first.
		if err := la.Err(); !strings.Contains(err.Error(), "("+observe.LossDeleted+")") && !strings.Contains(err.Error(), "("+observe.LossTaken+")") {
			t.Errorf("A's loss: %v, want the reason %s or %s", err, observe.LossDeleted, observe.LossTaken)
		}
	case <-time.After(5 * time.Second):
		t.Error("A was not told within 5 s that it holds on 2 of 5 nodes")
	}
	t.Logf("two holders: A fence %d, B fence %d", la.Fence(), lb.Fence())
	if lb.Fence() <= la.Fence() {
		t.Fatalf("B's fence %d not above A's %d", lb.Fence(), la.Fence())
	}
	if err := write(lb); err != nil {
		t.Fatalf("B's write: %v", err)
	}
	if err := write(la); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("A's write after B's: %v, want fence.ErrStale", err)
	}
}

// A clock jump on a node, simulated by shortening the lock's expiry there
// (PEXPIRE), with another node down: the holder keeps a majority (three of
// five), so nobody else gets in and its renewal succeeds. With the clocks
// of two nodes jumping, the holder is down to two nodes: nobody has a
// majority; its renewal fails (not ErrNotHeld: the dead node may still
// hold it for all Redlock knows) and it loses the lock at its deadline.
func TestClockJump(t *testing.T) {
	for _, jumps := range []int{1, 2} {
		t.Run(strconv.Itoa(jumps), func(t *testing.T) {
			ctx := testContext(t)
			servers := nodes(t, 5)
			addrs := addrsOf(servers)
			a, b := client(t, addrs), client(t, addrs)
			const lease = 2 * time.Second
			la, err := a.TryLock(ctx, "jump", distlock.WithLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			defer la.Release(ctx)
			servers[4].Kill()
			for i := range jumps {
				if _, err := testserver.RedisCommand(ctx, addrs[i], "PEXPIRE", lockName("jump"), "1"); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Second)
			for len(holders(t, addrs[:4], "jump")) != 4-jumps && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // polling the store's state, bounded
			}
			_, berr := b.TryLock(ctx, "jump")
			rerr := la.Renew(ctx)
			t.Logf("%d jump(s), 1 node down: other client %v; holder's renewal %v", jumps, berr, rerr)
			if !errors.Is(berr, distlock.ErrNotAcquired) {
				t.Fatalf("other client: %v, want ErrNotAcquired", berr)
			}
			switch jumps {
			case 1:
				if rerr != nil {
					t.Fatalf("renewal on three of five: %v", rerr)
				}
			case 2:
				if rerr == nil || errors.Is(rerr, distlock.ErrNotHeld) {
					t.Fatalf("renewal on two of five: %v, want the dead node's failure", rerr)
				}
				select {
				case <-la.Done():
				case <-time.After(lease + time.Second):
					t.Fatal("holder not told of the loss by its deadline")
				}
				t.Logf("holder lost the lock %v before the lease's end: %v", time.Until(la.ExpiresAt()), la.Err())
			}
		})
	}
}

// The fence is the largest of the granting nodes', so a node whose counter
// (or clock) runs ahead decides it: once that node is gone, the next grant
// has a lower fence. Here node 0's counter is set a second ahead.
func TestFenceFollowsTheNodeAhead(t *testing.T) {
	ctx := testContext(t)
	servers := nodes(t, 3)
	addrs := addrsOf(servers)
	c := client(t, addrs)
	ahead := strconv.FormatInt(time.Now().Add(time.Second).UnixMicro(), 10)
	if _, err := testserver.RedisCommand(ctx, addrs[0], "SET", lockName("ahead")+":fence", ahead); err != nil {
		t.Fatal(err)
	}
	l1, err := c.TryLock(ctx, "ahead")
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	servers[0].Kill()
	l2, err := c.TryLock(ctx, "ahead")
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if l2.Fence() >= l1.Fence() {
		t.Fatalf("fence %d after %d: the documented decrease did not happen", l2.Fence(), l1.Fence())
	}
	t.Logf("fence %d, then %d without the node ahead", l1.Fence(), l2.Fence())
}

// Every node behind a dead link: Release gives up within the client's
// budget with an error, Close returns, and the nodes free the key when the
// lease runs out.
func TestReleaseThroughDeadLinks(t *testing.T) {
	for name, fault := range map[string]func(*faultproxy.Proxy){"blackhole": (*faultproxy.Proxy).Blackhole, "cut": (*faultproxy.Proxy).Cut} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			addrs := addrsOf(nodes(t, 3))
			proxies := make([]*faultproxy.Proxy, len(addrs))
			via := make([]string, len(addrs))
			for i, a := range addrs {
				proxies[i] = faultproxy.Start(t, a)
				via[i] = proxies[i].Addr()
			}
			c := distlock.New(open(t, via, "request_timeout=500ms"))
			l, err := c.TryLock(ctx, "dead-link", distlock.WithLease(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range proxies {
				fault(p)
			}
			done := make(chan error, 1)
			go func() { done <- l.Release(context.Background()) }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("release through dead links reported success")
				}
			case <-time.After(distlock.ReleaseBudget + 5*time.Second):
				t.Fatal("release through dead links still blocked")
			}
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case <-closed:
			case <-time.After(distlock.ReleaseBudget + 5*time.Second):
				t.Fatal("Close through dead links still blocked")
			}
			for _, p := range proxies {
				p.Restore()
			}
			l2, err := client(t, addrs).Lock(ctx, "dead-link", distlock.WithWait(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			_ = l2.Release(ctx)
		})
	}
}

// An attempt that fails after nodes restarted (the clients' connections to
// them are stale, so a node's first reply may be EOF) releases its grants
// on every node: no stray lock is left behind for the next attempt.
func TestFailedAttemptLeavesNoStray(t *testing.T) {
	ctx := testContext(t)
	for round := range 5 {
		servers := nodes(t, 5)
		addrs := addrsOf(servers)
		a, b := open(t, addrs, ""), open(t, addrs, "")
		servers[3].Kill()
		servers[4].Kill()
		if _, err := a.Acquire(ctx, driver.AcquireRequest{Key: "stray", Token: "A", TTL: 30 * time.Second}); err != nil {
			t.Fatal(err)
		}
		servers[3].Start()
		servers[4].Start()
		servers[2].Restart()
		_, err := b.Acquire(ctx, driver.AcquireRequest{Key: "stray", Token: "B", TTL: 30 * time.Second})
		if err == nil {
			continue // every node answered B at once: nothing to undo
		}
		for addr, token := range holders(t, addrs, "stray") {
			if token == "B" {
				t.Fatalf("round %d: node %s holds the failed attempt's token (%v)", round, addr, err)
			}
		}
	}
}
