package zklock_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func semPathOf(root, name string) string {
	return root + "/sem." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

// children returns the children of node, sorted, or nil if it is missing.
func children(t testing.TB, conn *zk.Conn, node string) []string {
	t.Helper()
	c, _, err := conn.Children(node)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		t.Fatalf("list %s: %v", node, err)
	}
	slices.Sort(c)
	return c
}

// TestSemaphoreNodes checks what a semaphore keeps in ZooKeeper: a refused
// attempt leaves no node, a released permit neither, the limit stays; and
// that a lock of the same name is another thing, which List shows alone.
func TestSemaphoreNodes(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, b := distlock.New(dial(t, srv.Addr(), root)), distlock.New(dial(t, srv.Addr(), root))
	defer a.Close()
	defer b.Close()
	const name = "sem"
	sa, err := a.Semaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := b.Semaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sa.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := sb.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a second permit of one: %v, want ErrNotAcquired", err)
		}
	}
	if c := children(t, conn, semPathOf(root, name)); len(c) != 2 || c[0] != "limit" {
		t.Fatalf("after refused attempts the semaphore's children are %q, want the holder's and the limit", c)
	}
	l, err := a.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("a lock named as a held semaphore: %v", err)
	}
	list, err := a.List(ctx, "")
	if err != nil || len(list) != 1 || list[0].Key != name || list[0].Fence != l.Fence() {
		t.Fatalf("List: %+v, %v; want only the lock", list, err)
	}
	for _, h := range []*distlock.Lock{p, l} {
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c := children(t, conn, semPathOf(root, name)); !slices.Equal(c, []string{"limit"}) {
		t.Fatalf("after release the semaphore's children are %q, want only the limit", c)
	}
	s2, err := b.Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.TryAcquire(ctx); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("a handle of 2 on a free semaphore of 1: %v, want ErrInvalidOption: the limit stays", err)
	}
}

// TestPermitRenewedIsNotExpired holds a permit with a short lease, renewed,
// while another backend keeps trying: a renewal restarts the others'
// measure of the lease, so every attempt is refused; once the renewals
// stop, the permit is freed at its lease.
func TestPermitRenewedIsNotExpired(t *testing.T) {
	const lease = 300 * time.Millisecond
	srv := zkServer(t)
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, other := dial(t, srv.Addr(), root), dial(t, srv.Addr(), root)
	defer holder.Close()
	defer other.Close()
	req := driver.AcquireRequest{Key: "renewed", Token: "0123456789abcdef0123456789abcdef", TTL: lease}
	if _, err := holder.AcquirePermit(ctx, req, 1); err != nil {
		t.Fatal(err)
	}
	attempt := func(i int) error {
		r := driver.AcquireRequest{Key: req.Key, Token: fmt.Sprintf("%032x", i+1), TTL: time.Minute}
		_, err := other.AcquirePermit(ctx, r, 1)
		return err
	}
	for i := range 30 { // 1.5s, five leases
		if err := attempt(i); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("attempt %d against a renewed permit: %v, want ErrNotAcquired", i, err)
		}
		if i%2 == 0 {
			if err := holder.RenewPermit(ctx, req.Key, req.Token, lease); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(50 * time.Millisecond) // the pace of the attempts, not synchronisation
	}
	start := time.Now()
	for i := 0; ; i++ {
		err := attempt(i)
		if err == nil {
			break
		}
		if !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatal(err)
		}
		if time.Since(start) > 10*lease {
			t.Fatalf("the permit is not freed %v after its last renewal", time.Since(start))
		}
		time.Sleep(20 * time.Millisecond) // the pace of the attempts
	}
	if took := time.Since(start); took < lease/2 {
		t.Errorf("the permit was freed %v after its last renewal, before its lease of %v", took, lease)
	}
	if err := holder.RenewPermit(ctx, req.Key, req.Token, lease); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("renewing the expired permit: %v, want ErrNotHeld", err)
	}
}

// TestSemaphoreCallsAfterClose checks that every semaphore and read-write
// lock call fails at once with ErrClosed after Close.
func TestSemaphoreCallsAfterClose(t *testing.T) {
	srv := zkServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := dial(t, srv.Addr(), uniqueRoot(t))
	req := driver.AcquireRequest{Key: "closed", Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
	if _, err := b.AcquirePermit(ctx, req, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"AcquirePermit":  func() error { _, err := b.AcquirePermit(ctx, req, 1); return err },
		"RenewPermit":    func() error { return b.RenewPermit(ctx, req.Key, req.Token, time.Minute) },
		"ReleasePermit":  func() error { return b.ReleasePermit(ctx, req.Key, req.Token) },
		"SetPermits":     func() error { return b.SetPermits(ctx, req.Key, 2) },
		"InspectPermits": func() error { _, _, err := b.InspectPermits(ctx, req.Key); return err },
		"WatchPermits":   func() error { _, _, err := b.WatchPermits(ctx, req.Key); return err },
		"AcquireRW":      func() error { _, err := b.AcquireRW(ctx, req, driver.Shared); return err },
		"RenewRW":        func() error { return b.RenewRW(ctx, req.Key, req.Token, time.Minute) },
		"ReleaseRW":      func() error { return b.ReleaseRW(ctx, req.Key, req.Token) },
		"WithdrawIntent": func() error { return b.WithdrawIntent(ctx, req.Key, "intent") },
		"InspectRW":      func() error { _, _, _, err := b.InspectRW(ctx, req.Key); return err },
		"WatchRW":        func() error { _, _, err := b.WatchRW(ctx, req.Key); return err },
	}
	for call, f := range calls {
		start := time.Now()
		if err := f(); !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", call, err)
		}
		if took := time.Since(start); took > 100*time.Millisecond {
			t.Errorf("%s after Close took %v", call, took)
		}
	}
}

// TestWaitersDoNotWakeEachOther keeps three waiters on other clients
// behind a held permit for a second: a refused attempt creates and deletes
// a node, which must not wake the other waiters, else they would wake each
// other in a loop for as long as the permit is held. The parent's cversion
// counts the creates and deletes of permit nodes.
func TestWaitersDoNotWakeEachOther(t *testing.T) {
	const waiters, wait = 3, time.Second
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := distlock.New(dial(t, srv.Addr(), root))
	defer holder.Close()
	const name = "busy"
	s, err := holder.Semaphore(name, 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cversion := func() int32 {
		_, st, err := conn.Get(semPathOf(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return st.Cversion
	}
	before := cversion()
	errs := make(chan error, waiters)
	for range waiters {
		c := distlock.New(dial(t, srv.Addr(), root))
		defer c.Close()
		ws, err := c.Semaphore(name, 1)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := ws.Acquire(ctx, distlock.WithWait(wait))
			errs <- err
		}()
	}
	for range waiters {
		select {
		case err := <-errs:
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("a wait behind a held permit: %v, want ErrNotAcquired", err)
			}
		case <-time.After(wait + 10*time.Second):
			t.Fatal("a wait did not end")
		}
	}
	// Each waiter polls at most every 5ms at first, then backs off to 100ms.
	attempts := int(cversion()-before) / 2
	t.Logf("%d attempts by %d waiters in %v", attempts, waiters, wait)
	if most := waiters * 40; attempts > most {
		t.Errorf("%d attempts by %d waiters in %v, want at most %d: the waiters wake each other", attempts, waiters, wait, most)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSemaphoreBadInput checks that a limit under 1 and an unknown mode
// fail with ErrInvalidOption and create nothing.
func TestSemaphoreBadInput(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := dial(t, srv.Addr(), root)
	defer b.Close()
	req := driver.AcquireRequest{Key: "bad", Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
	for _, n := range []int{0, -1} {
		if _, err := b.AcquirePermit(ctx, req, n); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("AcquirePermit with a limit of %d: %v, want ErrInvalidOption", n, err)
		}
		if err := b.SetPermits(ctx, req.Key, n); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("SetPermits(%d): %v, want ErrInvalidOption", n, err)
		}
	}
	if _, err := b.AcquireRW(ctx, req, driver.Mode(7)); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("AcquireRW in mode 7: %v, want ErrInvalidOption", err)
	}
	if c := children(t, conn, root); len(c) != 0 {
		t.Errorf("bad input created %q", c)
	}
}

// TestPermitLostWhenNodeDeleted deletes a held permit's node behind its
// holder's back, as an operator would: the permit is reported lost, and
// its release says it was not held.
func TestPermitLostWhenNodeDeleted(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, srv.Addr(), root))
	defer c.Close()
	const name = "lost"
	s, err := c.Semaphore(name, 2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range children(t, conn, semPathOf(root, name)) {
		if n != "limit" {
			if err := conn.Delete(semPathOf(root, name)+"/"+n, -1); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the permit whose node was deleted is not reported lost")
	}
	if err := p.Release(ctx); err == nil {
		t.Error("releasing a lost permit succeeded")
	}
}
