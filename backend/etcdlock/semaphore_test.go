package etcdlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// storeKeys returns the store keys under prefix/esc(internal), oldest first.
func storeKeys(t *testing.T, cli *clientv3.Client, prefix, internal string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"/"+etcdlock.Escape(layoutOf(t, cli, prefix), internal), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// semKeys returns the store keys of semaphore name: its permits, then its
// limit.
func semKeys(t *testing.T, cli *clientv3.Client, prefix, name string) []string {
	return storeKeys(t, cli, prefix, "\x00sem\x00"+name+"\x00")
}

// A refused attempt deletes the entry it put: it leaves the limit and the
// holders' permits, nothing else.
func TestSemaphoreRefusedAttemptLeavesNothing(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli, prefix := admin(t, eps), uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, eps, prefix))
	defer c.Close()
	sem, err := c.Semaphore("s", 2)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := sem.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := semKeys(t, cli, prefix, "s")
	if len(before) != 3 {
		t.Fatalf("two permits held: keys %q, want two permits and the limit", before)
	}
	for range 3 {
		if _, err := sem.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a third permit of 2: %v, want ErrNotAcquired", err)
		}
	}
	if after := semKeys(t, cli, prefix, "s"); len(after) != len(before) {
		t.Fatalf("after refused attempts: keys %q, want %q", after, before)
	}
}

// A lock, a semaphore and a read-write lock of one name, and a semaphore
// whose name extends it, keep apart: none blocks or wakes another.
func TestSyncPrimitivesKeepApart(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	prefix := uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := dial(t, eps, prefix)
	c := distlock.New(b)
	defer c.Close()
	l, err := c.TryLock(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	sem, err := c.Semaphore("n", 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a permit of a semaphore named as a held lock: %v", err)
	}
	longer, err := c.Semaphore("n2", 1)
	if err != nil {
		t.Fatal(err)
	}
	wake, stop, err := b.WatchPermits(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	p2, err := longer.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("a permit of semaphore n2 while n is full: %v", err)
	}
	if err := p2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("n")
	if err != nil {
		t.Fatal(err)
	}
	w, err := rw.TryLock(ctx)
	if err != nil {
		t.Fatalf("the write hold of a read-write lock named as a held lock and a full semaphore: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
		t.Fatal("semaphore n's watch fired for releases of other names")
	case <-time.After(200 * time.Millisecond): // not synchronisation: a chance for a stray notice
	}
	info, err := b.Inspect(ctx, "n")
	if err != nil || info.Held {
		t.Fatalf("lock n after its release: %+v, %v; the semaphore's permit shows as the lock", info, err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("semaphore n's watch did not fire on its permit's release")
	}
}

// A permit whose entry vanishes (an operator, a revoked lease) is reported
// lost.
func TestPermitLostWhenEntryDeleted(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	cli, prefix := admin(t, eps), uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, eps, prefix))
	defer c.Close()
	sem, err := c.Semaphore("s", 3)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var permits []string
	for _, k := range semKeys(t, cli, prefix, "s") {
		if strings.Contains(k, "%00p/") {
			permits = append(permits, k)
		}
	}
	if len(permits) != 1 {
		t.Fatalf("permit entries %q, want one", permits)
	}
	deleteEntries(t, cli, permits)
	select {
	case <-p.Done():
		if !errors.Is(p.Err(), distlock.ErrLockLost) {
			t.Fatalf("lost permit's Err: %v, want ErrLockLost", p.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a permit whose entry was deleted was not reported lost")
	}
	if err := p.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) && !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("release of a lost permit: %v", err)
	}
}

// Every semaphore and read-write lock call after Close fails with
// ErrClosed, naming the name.
func TestSyncPrimitivesAfterClose(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	b := dial(t, eps, uniquePrefix(t))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "name", Token: "00", TTL: time.Second}
	watch := func(f func(context.Context, string) (<-chan struct{}, func(), error)) error {
		_, _, err := f(ctx, "name")
		return err
	}
	for what, err := range map[string]error{
		"AcquirePermit":  func() error { _, err := b.AcquirePermit(ctx, req, 1); return err }(),
		"RenewPermit":    b.RenewPermit(ctx, "name", "00", time.Second),
		"ReleasePermit":  b.ReleasePermit(ctx, "name", "00"),
		"SetPermits":     b.SetPermits(ctx, "name", 2),
		"InspectPermits": func() error { _, _, err := b.InspectPermits(ctx, "name"); return err }(),
		"WatchPermits":   watch(b.WatchPermits),
		"AcquireRW":      func() error { _, err := b.AcquireRW(ctx, req, driver.Exclusive); return err }(),
		"RenewRW":        b.RenewRW(ctx, "name", "00", time.Second),
		"ReleaseRW":      b.ReleaseRW(ctx, "name", "00"),
		"WithdrawIntent": b.WithdrawIntent(ctx, "name", "i"),
		"InspectRW":      func() error { _, _, _, err := b.InspectRW(ctx, "name"); return err }(),
		"WatchRW":        watch(b.WatchRW),
	} {
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", what, err)
		}
	}
}

// After SetPermits lowers the limit, the permits held over it stay, and
// nobody is granted until fewer than the new limit are held.
func TestLoweredLimitGrantsNoneUntilBelow(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := distlock.New(dial(t, eps, uniquePrefix(t)))
	defer c.Close()
	three, err := c.Semaphore("s", 3)
	if err != nil {
		t.Fatal(err)
	}
	var held []*distlock.Lock
	for range 3 {
		p, err := three.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, p)
	}
	one, err := c.Semaphore("s", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := one.SetPermits(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for i, p := range held {
		if _, err := one.TryAcquire(ctx); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a permit of 1 while %d are held: %v, want ErrNotAcquired", len(held)-i, err)
		}
		if err := p.Release(ctx); err != nil {
			t.Fatalf("a permit held over the lowered limit: %v", err)
		}
	}
	p, err := one.TryAcquire(ctx)
	if err != nil {
		t.Fatalf("the permit of 1 once none is held: %v", err)
	}
	if p.Fence() <= held[2].Fence() {
		t.Errorf("fence %d after %d: not increasing", p.Fence(), held[2].Fence())
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// attempts counts the single attempts a backend makes on permits.
type attempts struct {
	*etcdlock.Backend
	n *atomic.Int64
}

func (a attempts) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	a.n.Add(1)
	return a.Backend.AcquirePermit(ctx, req, limit)
}

// Waiters for a full semaphore do not wake each other with their refused
// attempts: each attempt's entry is deleted again, and only the deletion
// of a held permit (or a new limit) is a notice. Three waiters on their
// own clients, for 1.5s while the one permit stays held, make about as
// many attempts as the client's poll alone would.
func TestRefusedAttemptsWakeNobody(t *testing.T) {
	const waiters, wait = 3, 1500 * time.Millisecond
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	prefix := uniquePrefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := distlock.New(dial(t, eps, prefix))
	defer holder.Close()
	sem, err := holder.Semaphore("s", 1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := sem.TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	errs := make(chan error, waiters)
	for range waiters {
		c := distlock.New(attempts{dial(t, eps, prefix), &n})
		defer c.Close()
		s, err := c.Semaphore("s", 1)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			_, err := s.Acquire(ctx, distlock.WithWait(wait))
			errs <- err
		}()
	}
	for range waiters {
		if err := <-errs; !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a waiter while the permit stays held: %v, want ErrNotAcquired", err)
		}
	}
	// The client's jittered poll (capped at 100ms once it watches) makes
	// about 30 attempts in 1.5s; waking each other, waiters make hundreds.
	if got := n.Load(); got > waiters*60 {
		t.Errorf("%d attempts by %d waiters in %v: refused attempts wake the other waiters", got, waiters, wait)
	} else {
		t.Logf("%d attempts by %d waiters in %v", got, waiters, wait)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The errors of a permit's or a read-write hold's renewal and release name
// neither the backend's internal key nor the semaphore or lock, which the
// client names.
func TestErrorsNameNoSyncPrimitive(t *testing.T) {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := dial(t, eps, uniquePrefix(t))
	defer b.Close()
	req := driver.AcquireRequest{Key: "jobs", Token: "0123456789abcdef0123456789abcdef", TTL: 10 * time.Second}
	if _, err := b.AcquirePermit(ctx, req, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleasePermit(ctx, "jobs", req.Token); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireRW(ctx, req, driver.Shared); err != nil {
		t.Fatal(err)
	}
	if err := b.ReleaseRW(ctx, "jobs", req.Token); err != nil {
		t.Fatal(err)
	}
	for what, err := range map[string]error{
		"renewed permit":   b.RenewPermit(ctx, "jobs", req.Token, time.Minute),
		"released permit":  b.ReleasePermit(ctx, "jobs", req.Token),
		"renewed rw hold":  b.RenewRW(ctx, "jobs", req.Token, time.Minute),
		"released rw hold": b.ReleaseRW(ctx, "jobs", req.Token),
	} {
		if !errors.Is(err, driver.ErrNotHeld) || !strings.HasPrefix(err.Error(), driver.ErrNotHeld.Error()) ||
			strings.Contains(err.Error(), "jobs") || strings.Contains(err.Error(), `\x00`) {
			t.Errorf("%s after its release: %q; want ErrNotHeld, naming no key", what, err)
		}
	}
}
