package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/observe"
)

// startSeen is an Observer that signals the start of an acquisition and each
// acquire call the store refused, so a test knows a waiter is waiting.
type startSeen struct {
	started chan struct{}
	refused chan struct{}
	once    sync.Once
}

func newStartSeen() *startSeen {
	return &startSeen{started: make(chan struct{}), refused: make(chan struct{}, 1)}
}

func (o *startSeen) AcquireStarted(ctx context.Context, _ observe.Event) context.Context {
	o.once.Do(func() { close(o.started) })
	return ctx
}

func (o *startSeen) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.StoreCall && e.Op == "acquire" && errors.Is(e.Err, distlock.ErrNotAcquired) {
		select {
		case o.refused <- struct{}{}:
		default:
		}
	}
}

// queued waits until a waiter observed by o is in line for a held key: its
// first attempt was refused or, with a native queue (which makes no attempt
// the client sees), a moment after it started, enough to enqueue on loopback.
func (o *startSeen) queued(t *testing.T, native bool) {
	t.Helper()
	select {
	case <-o.started:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never started")
	}
	if native {
		time.Sleep(300 * time.Millisecond)
		return
	}
	select {
	case <-o.refused:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter never tried the held key")
	}
}

func isWaiter(b driver.Backend) bool {
	_, ok := b.(driver.Waiter)
	return ok
}

// closeEndsWait: Close ends a wait at once with ErrClosed and leaves nothing
// in the store's queue that would delay the next holder.
func (s *suite) closeEndsWait(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a := s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, a, key)
	seen := newStartSeen()
	b := s.h.NewBackend(t)
	waiter := distlock.New(b, distlock.WithObserver(seen))
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, key) // no wait budget: only Close or the test's end stops it
		errc <- err
	}()
	seen.queued(t, isWaiter(b))
	closed := make(chan error, 1)
	go func() { closed <- waiter.Close() }()
	select {
	case err := <-errc:
		if !errors.Is(err, distlock.ErrClosed) {
			t.Fatalf("wait ended by Close: got %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the wait within 5s")
	}
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(2 * distlock.ReleaseBudget):
		t.Fatalf("Close did not return within %v", 2*distlock.ReleaseBudget)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the holder was disturbed: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := s.client(t).TryLock(ctx, key)
	if err != nil {
		t.Fatalf("after the closed waiter left, a free key was refused: %v", err)
	}
	_ = next.Release(ctx)
}

// needProxy skips t unless the harness lets the suite put fault proxies
// in front of the store.
func (s *suite) needProxy(t *testing.T) {
	if (s.h.NewBackendAt == nil || s.h.StoreAddr == "") && (s.h.NewBackendAtAll == nil || len(s.h.StoreAddrs) == 0) {
		t.Skip("the harness sets neither StoreAddr/NewBackendAt nor StoreAddrs/NewBackendAtAll: no fault proxy test")
	}
}

// proxies are the fault proxies in front of every node of the store.
type proxies []*faultproxy.Proxy

func (ps proxies) blackhole() { ps.each((*faultproxy.Proxy).Blackhole) }
func (ps proxies) cut()       { ps.each((*faultproxy.Proxy).Cut) }
func (ps proxies) restore()   { ps.each((*faultproxy.Proxy).Restore) }

func (ps proxies) each(f func(*faultproxy.Proxy)) {
	for _, p := range ps {
		f(p)
	}
}

// backendThroughProxy returns a new backend that reaches the store through
// fault proxies, one per node, and the proxies.
func (s *suite) backendThroughProxy(t *testing.T) (driver.Backend, proxies) {
	if s.h.NewBackendAtAll == nil || len(s.h.StoreAddrs) == 0 {
		p := faultproxy.Start(t, s.h.StoreAddr)
		return s.h.NewBackendAt(t, p.Addr()), proxies{p}
	}
	ps := make(proxies, len(s.h.StoreAddrs))
	addrs := make([]string, len(ps))
	for i, a := range s.h.StoreAddrs {
		ps[i] = faultproxy.Start(t, a)
		addrs[i] = ps[i].Addr()
	}
	return s.h.NewBackendAtAll(t, addrs), ps
}

// releaseThroughDeadLink: Release returns within a bound when the store
// stops answering (blackhole) or refuses connections (cut), and the key is
// free once its lease runs out.
func (s *suite) releaseThroughDeadLink(t *testing.T) {
	s.needProxy(t)
	faults := []struct {
		name  string
		apply func(proxies)
	}{{"blackhole", proxies.blackhole}, {"cut", proxies.cut}}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel() // each waits out the release budget on its own links
			ctx := testContext(t, time.Minute)
			bb, links := s.backendThroughProxy(t)
			c := distlock.New(bb)
			key := s.key(t)
			const lease = time.Second
			// A wait, though the key is free: the first attempt on new
			// links may miss a short lease's reply budget on a busy
			// machine, and the subject here is the release.
			l, err := c.Lock(ctx, key, distlock.WithLease(lease), distlock.WithWait(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			f.apply(links)
			relErr := make(chan error, 1)
			start := time.Now()
			go func() { relErr <- l.Release(context.Background()) }()
			bound := distlock.ReleaseBudget + 5*time.Second // the budget plus one request's timeout
			select {
			case err := <-relErr:
				if err == nil {
					t.Fatalf("release through a %s link reported success", f.name)
				}
				t.Logf("release through a %s link returned after %v: %v", f.name, time.Since(start).Round(time.Millisecond), err)
			case <-time.After(bound):
				t.Fatalf("release through a %s link still blocked after %v", f.name, bound)
			}
			closed := make(chan error, 1)
			go func() { closed <- c.Close() }()
			select {
			case <-closed:
			case <-time.After(bound):
				t.Fatalf("Close through a %s link still blocked after %v", f.name, bound)
			}
			links.restore()
			// The store frees the key when the lease runs out.
			l2 := mustLock(t, ctx, s.client(t), key, distlock.WithWait(lease+10*time.Second))
			_ = l2.Release(ctx)
		})
	}
}

// waitOutlastsCutLink: a waiter whose link to the store is cut and restored
// while it waits gets the key when the holder releases it within the wait:
// a store failure during a wait is retried while the wait lasts, not
// returned at once.
func (s *suite) waitOutlastsCutLink(t *testing.T) {
	s.needProxy(t)
	ctx := testContext(t, time.Minute)
	key := s.key(t)
	l := mustLock(t, ctx, s.client(t), key)
	seen := newStartSeen()
	bb, links := s.backendThroughProxy(t)
	b := distlock.New(bb, distlock.WithObserver(seen))
	defer b.Close()
	type result struct {
		l   *distlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l2, err := b.Lock(ctx, key, distlock.WithWait(30*time.Second))
		got <- result{l2, err}
	}()
	seen.queued(t, isWaiter(bb))
	links.cut()
	time.Sleep(500 * time.Millisecond) // not synchronisation: the outage
	links.restore()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("a wait whose link was cut for 500ms and restored, with the key released after: %v", r.err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("the waiter still waits 40s after the release")
	}
}

// releaseAfterBackendClosed: a closed backend is a permanent failure, which
// Release reports at once with ErrClosed instead of retrying.
func (s *suite) releaseAfterBackendClosed(t *testing.T) {
	ctx := testContext(t, time.Minute)
	b := s.h.NewBackend(t)
	c := distlock.New(b)
	key := s.key(t)
	// A wait, though the key is free: see releaseThroughDeadLink. A lease
	// long enough that a loaded machine cannot let it run out before the
	// release (a lost lock is released without asking the backend).
	l, err := c.Lock(ctx, key, distlock.WithLease(10*time.Second), distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = l.Release(ctx)
	if !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("release on a closed backend: got %v, want ErrClosed", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("release on a closed backend took %v: it must not retry a permanent error", took)
	}
	if _, err := b.Inspect(ctx, key); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("inspect on a closed backend: got %v, want ErrClosed", err)
	}
	_ = c.Close()
}

// waiterEntryDeleted: a waiter whose queue entry vanished while it waited
// (a revoked lease, an operator) queues again and gets the key once the
// holder releases it, within its wait; exclusion holds throughout.
func (s *suite) waiterEntryDeleted(t *testing.T) {
	if s.h.DeleteWaiters == nil {
		t.Skip("the backend has no native queue (harness sets no DeleteWaiters)")
	}
	ctx := testContext(t, time.Minute)
	a, other := s.client(t), s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, a, key)
	seen := newStartSeen()
	b := s.h.NewBackend(t)
	waiter := distlock.New(b, distlock.WithObserver(seen))
	t.Cleanup(func() { _ = waiter.Close() })
	type result struct {
		l   *distlock.Lock
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, distlock.WithWait(20*time.Second))
		got <- result{l, err}
	}()
	seen.queued(t, isWaiter(b))
	s.h.DeleteWaiters(t, key)
	select {
	case r := <-got:
		t.Fatalf("the waiter left the wait when its entry was deleted: %v", r.err)
	case <-time.After(500 * time.Millisecond):
	}
	wantNotAcquired(t, ctx, other, key) // the holder still holds it
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter whose entry was deleted never got the released key")
	}
	if r.err != nil {
		t.Fatalf("waiter whose entry was deleted: %v", r.err)
	}
	wantNotAcquired(t, ctx, other, key)
	if err := r.l.Err(); err != nil {
		t.Fatalf("the new holder: %v", err)
	}
	if r.l.Fence() <= l.Fence() {
		t.Fatalf("fence %d not above the previous holder's %d", r.l.Fence(), l.Fence())
	}
	_ = r.l.Release(ctx)
}

// fencesInGrantOrder: fences seen inside the critical section, by many
// goroutines of several clients, strictly increase in the order the grants
// happened.
func (s *suite) fencesInGrantOrder(t *testing.T) {
	const goroutines, clients = 12, 4
	iterations := max(s.h.Iterations/4, 10)
	ctx := testContext(t, 3*time.Minute)
	key := s.key(t)
	cs := make([]*distlock.Client, clients)
	for i := range cs {
		cs[i] = s.client(t)
	}
	var (
		mu     sync.Mutex
		fences []uint64
		wg     sync.WaitGroup
		errs   = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range iterations {
				l, err := cs[g%clients].Lock(ctx, key, distlock.WithWait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				fences = append(fences, l.Fence())
				mu.Unlock()
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("grant %d got fence %d after fence %d: fences must increase in grant order", i, fences[i], fences[i-1])
		}
	}
}

// callbacksMayRelease: an observer may call Release and Err from the event
// that reports the loss.
func (s *suite) callbacksMayRelease(t *testing.T) {
	if s.h.DeleteKey == nil {
		t.Skip("harness has no DeleteKey")
	}
	ctx := testContext(t, time.Minute)
	obs := &releaseOnLoss{released: make(chan error, 1)}
	c := s.client(t, distlock.WithObserver(obs))
	key := s.key(t)
	l := mustLock(t, ctx, c, key, distlock.WithLease(time.Second), distlock.WithWatchdog(true),
		distlock.WithRenewInterval(50*time.Millisecond))
	obs.lock.Store(l)
	s.h.DeleteKey(t, key)
	select {
	case err := <-obs.released:
		if err != nil && !errors.Is(err, distlock.ErrLockLost) && !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("Release from the loss event: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Release called by an observer of the loss never returned")
	}
}

// releaseOnLoss releases its lock from the observe.Lost of that lock.
type releaseOnLoss struct {
	lock     atomic.Pointer[distlock.Lock]
	once     sync.Once
	released chan error
}

func (o *releaseOnLoss) AcquireStarted(ctx context.Context, _ observe.Event) context.Context {
	return ctx
}

func (o *releaseOnLoss) Observe(ctx context.Context, e observe.Event) {
	l := o.lock.Load()
	if e.Kind != observe.Lost || l == nil {
		return
	}
	o.once.Do(func() {
		_ = l.Err()
		o.released <- l.Release(ctx)
	})
}

// forceRelease checks the optional driver.ForceReleaser: the key is freed
// whoever holds it, the hold's state is reported, the old holder can
// neither renew nor free the next holder's lock, and a call without a
// reason (an empty driver.ForceOptions) works too.
func (s *suite) forceRelease(t *testing.T) {
	ctx := testContext(t, time.Minute)
	admin := s.client(t)
	if _, ok := admin.Backend().(driver.ForceReleaser); !ok {
		t.Skip("the backend does not implement driver.ForceReleaser")
	}
	a, b, c := s.client(t), s.client(t), s.client(t)
	key := s.key(t)
	old := mustLock(t, ctx, a, key, distlock.WithOwner("stuck-job"), distlock.WithBusinessID("run-9"))
	info, err := admin.ForceRelease(ctx, key, "stuck for an hour")
	if errors.Is(err, errors.ErrUnsupported) {
		_ = old.Release(ctx)
		t.Skipf("force release is switched off in this backend's configuration: %v", err)
	}
	if err != nil {
		t.Fatalf("force release: %v", err)
	}
	if !info.Held || info.Fence != old.Fence() || info.Meta.Owner != "stuck-job" || info.Meta.BusinessID != "run-9" {
		t.Fatalf("force release reported %+v, want the ended hold (fence %d, owner stuck-job, business id run-9)", info, old.Fence())
	}
	cur := mustLock(t, ctx, b, key, distlock.WithWait(5*time.Second))
	if cur.Fence() <= old.Fence() {
		t.Fatalf("fence after a force release %d not above %d", cur.Fence(), old.Fence())
	}
	if err := old.Renew(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("renew by the forced-out holder: got %v, want ErrLockLost", err)
	}
	// Told at once by the backend (deleted: the key was free then), or at
	// that renewal, when b held the key (renew_refused if the store was too
	// slow to say so).
	switch err := old.Err(); {
	case strings.Contains(err.Error(), "("+observe.LossStoreDeleted+")"), strings.Contains(err.Error(), "("+observe.LossDeleted+")"),
		strings.Contains(err.Error(), "("+observe.LossTaken+")"), strings.Contains(err.Error(), "("+observe.LossRenewRefused+")"):
	default:
		t.Fatalf("the forced-out holder's Err = %v, want the reason %s, %s or %s", err, observe.LossStoreDeleted, observe.LossDeleted, observe.LossTaken)
	}
	_ = old.Release(ctx)
	wantNotAcquired(t, ctx, c, key)
	if _, err := admin.ForceRelease(ctx, key+"/free", "nothing there"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("force release of a free key: got %v, want ErrNotHeld", err)
	}
	// A direct call may give no reason.
	info, err = admin.Backend().(driver.ForceReleaser).ForceRelease(ctx, key, driver.ForceOptions{})
	if err != nil || info.Fence != cur.Fence() {
		t.Fatalf("force release without a reason: %+v, %v; want the hold of fence %d", info, err, cur.Fence())
	}
	_ = cur.Release(ctx)
}

// extend checks Extend: the store keeps the key for the new lease, past
// the first lease even where the store rounds leases up to whole seconds.
func (s *suite) extend(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	const short, long = 600 * time.Millisecond, 6 * time.Second
	start := time.Now()
	l := mustLock(t, ctx, a, key, distlock.WithLease(short))
	if err := l.Extend(ctx, long); err != nil {
		t.Fatalf("extend: %v", err)
	}
	if left := time.Until(l.ExpiresAt()); left < long/2 {
		t.Fatalf("validity left after extending to %v: %v", long, left)
	}
	info, err := b.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if info.TTL != 0 && info.TTL < long/2 {
		t.Fatalf("store TTL after extending to %v: %v", long, info.TTL)
	}
	time.Sleep(time.Until(start.Add(2500 * time.Millisecond))) // past the first lease, rounded up to a second, and a keepalive
	if err := l.Err(); err != nil {
		t.Fatalf("lost within the extended lease: %v", err)
	}
	wantNotAcquired(t, ctx, b, key)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// closeDuringCalls closes a backend while other goroutines are in the middle
// of its calls, waits included, as a shutting-down process does: every call
// returns (with a result or an error), those begun after Close returned fail
// with ErrClosed, and the race detector sees nothing.
func (s *suite) closeDuringCalls(t *testing.T) {
	ctx := testContext(t, time.Minute)
	b := s.h.NewBackend(t)
	key := s.key(t)
	holder := s.client(t)
	l := mustLock(t, ctx, holder, key+"/held")
	defer func() { _ = l.Release(ctx) }()
	closed := make(chan struct{})
	var wg sync.WaitGroup
	var afterClose atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			for i := range 100_000 { // until Close, which comes long before
				select {
				case <-closed:
					if err := closeDuringCallsStep(ctx, b, key, g, i); !errors.Is(err, distlock.ErrClosed) {
						t.Errorf("a call after Close: got %v, want ErrClosed", err)
					}
					afterClose.Add(1)
					return
				default:
				}
				_ = closeDuringCallsStep(ctx, b, key, g, i)
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	close(closed)
	wg.Wait()
	t.Logf("%d goroutines made a call after Close", afterClose.Load())
}

// closeDuringCallsStep makes one call of the backend's, by turn: an acquire
// and its release, a renewal, an inspection, or a short wait for a held key.
func closeDuringCallsStep(ctx context.Context, b driver.Backend, key string, g, i int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req := driver.AcquireRequest{Key: fmt.Sprintf("%s/%d-%d", key, g, i), Token: fmt.Sprintf("%032x", g*1000+i+1), TTL: 10 * time.Second}
	switch i % 4 {
	case 0:
		if _, err := b.Acquire(ctx, req); err != nil {
			return err
		}
		return b.Release(ctx, req.Key, req.Token)
	case 1:
		return b.Renew(ctx, req.Key, req.Token, time.Second)
	case 2:
		_, err := b.Inspect(ctx, req.Key)
		return err
	default:
		w, ok := b.(driver.Waiter)
		if !ok {
			_, err := b.Inspect(ctx, key+"/held")
			return err
		}
		req.Key = key + "/held"
		wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err := w.AcquireWait(wctx, req)
		if errors.Is(err, driver.ErrNotAcquired) && ctx.Err() == nil {
			return nil
		}
		return err
	}
}
