// Package locktest is the conformance suite every distlock backend passes.
// Third-party backends run it from their own tests:
//
//	func TestConformance(t *testing.T) {
//		locktest.Run(t, locktest.Harness{
//			NewBackend: func(t testing.TB) driver.Backend { return newBackend(t) },
//			DeleteKey:  func(t testing.TB, key string) { deleteBehindHoldersBack(t, key) },
//		})
//	}
//
// Each subtest uses its own keys, bounds every wait, and checks behaviour
// across several clients of the same store, so each backend returned by
// NewBackend should be its own connection, as separate processes would have.
// Most subtests run at the same time as others, so the Harness's functions
// must be safe for concurrent use; those that measure timing or goroutines
// run alone.
//
// Contend and Compare are the shared benchmarks: a contended handoff on one
// key, and Lock+Release against a store's raw floor, serially or in
// parallel, in alternating rounds.
package locktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
)

// Harness connects the suite to a backend under test.
type Harness struct {
	// NewBackend returns a new backend on the store under test. Every backend
	// it returns must reach the same store. The suite closes them.
	NewBackend func(t testing.TB) driver.Backend
	// DeleteKey removes key from the store behind its holder's back, as an
	// operator, an eviction or a failover would. Nil skips the lost-lock test.
	DeleteKey func(t testing.TB, key string)
	// Iterations per goroutine in the mutual exclusion test (16 goroutines
	// over 4 clients on one key); 50 if zero. IterationsEnv overrides it.
	Iterations int
	// NotifyLatency bounds the median time a waiter takes to get a released
	// key; 50ms if zero.
	NotifyLatency time.Duration
	// StoreAddr is the store's host:port. With NewBackendAt it lets the suite
	// put a fault proxy in front of the store, to test a dead or cut link.
	// Empty skips those tests.
	StoreAddr string
	// NewBackendAt returns a backend like NewBackend that reaches the store at
	// addr (host:port) instead of StoreAddr.
	NewBackendAt func(t testing.TB, addr string) driver.Backend
	// StoreAddrs and NewBackendAtAll are StoreAddr and NewBackendAt for a
	// store of independent nodes (Redlock): the suite puts a fault proxy in
	// front of each node, and faults them all at once.
	StoreAddrs      []string
	NewBackendAtAll func(t testing.TB, addrs []string) driver.Backend
	// DeleteWaiters removes the queue entries of every waiter of key (not of
	// its holder) behind their backs, as a revoked lease or an operator would.
	// Only backends with a native queue (driver.Waiter) set it; nil skips the
	// test of a waiter whose entry vanished.
	DeleteWaiters func(t testing.TB, key string)
	// MaxKeyLen is the longest key the backend takes, if it takes fewer than
	// distlock.MaxKeyLen bytes (a lock service that prefixes each key with
	// its tenant's namespace); longer keys must fail with ErrInvalidKey.
	MaxKeyLen int
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	runAll(t, cases(h))
}

// RunTopology runs the part of the suite whose outcome depends on how the
// store is deployed rather than on the client that reaches it: exclusion,
// fences, expiry and renewal, waking a waiter, listing, forcing, and the
// primitives that span several store keys. Use it for a deployment (Redis
// Cluster or Sentinel) or a second client library that another test already
// runs the whole suite against with the same code.
func RunTopology(t *testing.T, h Harness) {
	runAll(t, slices.DeleteFunc(cases(h), func(tc subtest) bool { return !topology[tc.name] }))
}

// topology names the subtests RunTopology runs.
var topology = map[string]bool{
	"AcquireAll":              true,
	"MutualExclusion":         true,
	"ReleasesWhileOthersWait": true,
	"FenceIncreases":          true,
	"FencesInGrantOrder":      true,
	"LeaseExpires":            true,
	"WatchdogKeepsLock":       true,
	"LostLockReported":        true,
	"WaitWokenOnRelease":      true,
	"CloseEndsWait":           true,
	"WaiterEntryDeleted":      true,
	"InspectAndList":          true,
	"ListPages":               true,
	"ForceRelease":            true,
	"ReleaseRequest":          true,
	"Semaphore":               true,
	"RWLock":                  true,
	"WeightedPermits":         true,
	"NoGoroutineLeak":         true,
}

// cases returns the suite's subtests for h, in order.
func cases(h Harness) []subtest {
	if h.Iterations == 0 {
		h.Iterations = 50
	}
	if h.MaxKeyLen <= 0 || h.MaxKeyLen > distlock.MaxKeyLen {
		h.MaxKeyLen = distlock.MaxKeyLen
	}
	if h.NotifyLatency == 0 {
		h.NotifyLatency = 50 * time.Millisecond
	}
	s := &suite{h: h}
	return []subtest{
		{"MutualExclusion", s.mutualExclusion},
		{"ReleasesWhileOthersWait", s.releasesWhileOthersWait},
		{"FenceIncreases", s.fenceIncreases},
		{"IndependentKeys", s.independentKeys},
		{"ReleaseWrongToken", s.releaseWrongToken},
		{"StaleReleaseChangesNothing", s.staleRelease},
		{"RepeatGrantRenews", s.repeatGrant},
		{"TokensOfEveryLength", s.tokensOfEveryLength},
		{"OneTokenOnTwoKeys", s.oneTokenOnTwoKeys},
		{"ForcedOneOfTwoKeys", s.forcedOneOfTwoKeys},
		{"LockAll", s.lockAll},
		{"AcquireAll", s.acquireAll},
		{"Handoff", s.handoff},
		{"LeaseExpires", s.leaseExpires},
		{"WatchdogKeepsLock", s.watchdogKeepsLock},
		{"LostLockReported", s.lostLockReported},
		{"MaxHold", s.maxHold},
		{"LockDelay", s.lockDelay},
		{"TryLockHeld", s.tryLockHeld},
		{"WaitTimeout", s.waitTimeout},
		{"WaitWokenOnRelease", s.waitWokenOnRelease},
		{"ContextCancelWhileWaiting", s.contextCancel},
		{"Reentrancy", s.reentrancy},
		{"Do", s.do},
		{"InspectAndList", s.inspectAndList},
		{"ListShowsOnlyLocks", s.listShowsOnlyLocks},
		{"ListPages", s.listPages},
		{"PrefixWatch", s.prefixWatch},
		{"InvalidInputTouchesNoStore", s.invalidInput},
		{"ReleaseAndRenewAfterRelease", s.afterRelease},
		{"ErrorsSayEachThingOnce", s.errorsSayEachThingOnce},
		{"CloseEndsWait", s.closeEndsWait},
		{"ReleaseThroughDeadLink", s.releaseThroughDeadLink},
		{"WaitOutlastsCutLink", s.waitOutlastsCutLink},
		{"ReleaseAfterBackendClosed", s.releaseAfterBackendClosed},
		{"CloseDuringCalls", s.closeDuringCalls},
		{"WaiterEntryDeleted", s.waiterEntryDeleted},
		{"FencesInGrantOrder", s.fencesInGrantOrder},
		{"CallbacksMayRelease", s.callbacksMayRelease},
		{"ForceRelease", s.forceRelease},
		{"ReleaseRequest", s.releaseRequest},
		{"Extend", s.extend},
		{"Semaphore", s.semaphore},
		{"WeightedPermits", s.weighted},
		{"RWLock", s.rwlock},
		{"RWDowngrade", s.rwDowngrade},
		{"LockPath", s.lockPath},
		{"NoGoroutineLeak", s.noLeak},
	}
}

// serial names the subtests that run alone, after the others: they measure
// contention, wake latency, a short lease's renewals or goroutines, which
// other subtests would disturb. NoGoroutineLeak runs last.
var serial = map[string]bool{
	"MutualExclusion":    true,
	"WaitWokenOnRelease": true,
	"WatchdogKeepsLock":  true,
	"NoGoroutineLeak":    true,
}

// concurrent is how many of the other subtests run at once. Most of their
// time is spent waiting for leases to run out and stores to answer, so
// running them together shortens the suite several times over on a small
// machine without starving any of them.
const concurrent = 6

// runAll runs tests under t with their own names: those not in serial
// concurrently, at most concurrent at a time, then those in serial one by
// one, in order.
func runAll(t *testing.T, tests []subtest) {
	slots := make(chan struct{}, concurrent)
	var wg sync.WaitGroup
	for _, tc := range tests {
		if serial[tc.name] {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			t.Run(tc.name, tc.fn)
		})
	}
	wg.Wait()
	for _, tc := range tests {
		if serial[tc.name] {
			t.Run(tc.name, tc.fn)
		}
	}
}

// subtest is one named case of the suite.
type subtest struct {
	name string
	fn   func(*testing.T)
}

// capability runs cases if a fresh backend claims an optional capability
// (claims); otherwise refuse, which uses the capability through a client,
// must fail with errors.ErrUnsupported, and the test is skipped.
func (s *suite) capability(t *testing.T, claims func(driver.Backend) bool, refuse func(*distlock.Client) error, cases []subtest) {
	probe := s.h.NewBackend(t)
	claimed := claims(probe)
	_ = probe.Close()
	if !claimed {
		if err := refuse(s.client(t)); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("on a backend without the capability: %v, want errors.ErrUnsupported", err)
		}
		t.Skip("the backend does not claim the capability")
	}
	for _, tc := range cases {
		t.Run(tc.name, tc.fn)
	}
}

type suite struct {
	h   Harness
	seq atomic.Int64
}

// key returns a key unique to this test and run.
func (s *suite) key(t *testing.T) string {
	return fmt.Sprintf("locktest/%s/%d-%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), s.seq.Add(1))
}

func (s *suite) client(t *testing.T, opts ...distlock.ClientOption) *distlock.Client {
	t.Helper()
	c := distlock.New(s.h.NewBackend(t), opts...)
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close client: %v", err)
		}
	})
	return c
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustLock(t *testing.T, ctx context.Context, c *distlock.Client, key string, opts ...distlock.Option) *distlock.Lock {
	t.Helper()
	l, err := c.Lock(ctx, key, append([]distlock.Option{distlock.WithWait(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("lock %q: %v", key, err)
	}
	return l
}

func wantNotAcquired(t *testing.T, ctx context.Context, c *distlock.Client, key string) {
	t.Helper()
	l, err := c.TryLock(ctx, key)
	if err == nil {
		_ = l.Release(ctx)
		t.Fatalf("TryLock %q succeeded while the key should be held", key)
	}
	if !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryLock %q: got %v, want ErrNotAcquired", key, err)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("error %q does not name the key %q", err, key)
	}
}

// wantHeldUntil is wantNotAcquired for a key held under a short lease that
// ends no sooner than end: a TryLock that succeeds is a failure only if it
// returned before end, as the store may have answered at any time until
// then. On a loaded machine the try can reach the store after the lease
// ran out, when the key is rightly free again.
func wantHeldUntil(t *testing.T, ctx context.Context, c *distlock.Client, key string, end time.Time) {
	t.Helper()
	l, err := c.TryLock(ctx, key)
	returned := time.Now()
	switch {
	case err == nil:
		_ = l.Release(ctx)
		if returned.Before(end) {
			t.Fatalf("TryLock %q succeeded %v before the holder's lease ended", key, end.Sub(returned))
		}
		t.Logf("TryLock %q returned %v after the holder's lease ended: too late to tell", key, returned.Sub(end))
	case !errors.Is(err, distlock.ErrNotAcquired):
		t.Fatalf("TryLock %q: got %v, want ErrNotAcquired", key, err)
	}
}

func waitDone(t *testing.T, l *distlock.Lock, within time.Duration, what string) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("%s: Done not closed within %v", what, within)
	}
}

// IterationsEnv, if set to a positive number, is the iterations per
// goroutine of the mutual exclusion test on every backend, for a longer
// run by hand than make test's (800 handoffs of the key by default).
const IterationsEnv = "DISTLOCK_LOCKTEST_ITERATIONS"

// iterationsFor returns the iterations per goroutine of the mutual
// exclusion test: IterationsEnv's, else the harness's.
func (s *suite) iterationsFor(t *testing.T) int {
	v := os.Getenv(IterationsEnv)
	if v == "" {
		return s.h.Iterations
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", IterationsEnv, v)
	}
	return n
}

func (s *suite) mutualExclusion(t *testing.T) {
	const goroutines, clients = 16, 4
	iterations := s.iterationsFor(t)
	ctx := testContext(t, 3*time.Minute)
	key := s.key(t)
	cs := make([]*distlock.Client, clients)
	for i := range cs {
		cs[i] = s.client(t)
	}
	var (
		counter, inside int
		overlap         atomic.Bool
		wg              sync.WaitGroup
		errs            = make(chan error, goroutines)
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := cs[g%clients]
			for range iterations {
				l, err := c.Lock(ctx, key, distlock.WithWait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
				inside++
				if inside != 1 {
					overlap.Store(true)
				}
				v := counter
				runtime.Gosched()
				counter = v + 1
				inside--
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
		t.Error(err)
	}
	if overlap.Load() {
		t.Error("two holders were inside the critical section at once")
	}
	if want := goroutines * iterations; counter != want {
		t.Errorf("counter = %d, want %d: an update was lost to a concurrent holder", counter, want)
	}
}

// releasesWhileOthersWait: every holder's release succeeds while waiters of
// its own client and of others wait for the key, each turn followed by a
// pause outside the lock, as work between turns leaves a client with no
// waiter of its own at a release while the others' still wait.
func (s *suite) releasesWhileOthersWait(t *testing.T) {
	const clients, goroutines, turns = 3, 3, 60
	ctx := testContext(t, 2*time.Minute)
	key := s.key(t)
	errs := make(chan error, clients*goroutines)
	var wg sync.WaitGroup
	for range clients {
		c := s.client(t)
		for range goroutines {
			wg.Go(func() {
				for range turns {
					l, err := c.Lock(ctx, key, distlock.WithWait(time.Minute))
					if err != nil {
						errs <- err
						return
					}
					if err := l.Release(ctx); err != nil {
						errs <- fmt.Errorf("a holder's release while others waited: %w", err)
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func (s *suite) fenceIncreases(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	var last uint64
	for i := range 6 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l := mustLock(t, ctx, c, key)
		if l.Fence() <= last {
			t.Fatalf("grant %d: fence %d not above previous %d", i, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A grant after an expiry also gets a higher fence.
	l := mustLock(t, ctx, a, key, distlock.WithLease(100*time.Millisecond))
	waitDone(t, l, 5*time.Second, "expiring lock")
	l2 := mustLock(t, ctx, b, key)
	if l2.Fence() <= l.Fence() {
		t.Fatalf("fence after expiry %d not above %d", l2.Fence(), l.Fence())
	}
	_ = l2.Release(ctx)
}

func (s *suite) independentKeys(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	k1, k2 := s.key(t), s.key(t)
	l1 := mustLock(t, ctx, a, k1)
	l2, err := b.TryLock(ctx, k2)
	if err != nil {
		t.Fatalf("holding %q blocked %q: %v", k1, k2, err)
	}
	for _, l := range []*distlock.Lock{l1, l2} {
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *suite) releaseWrongToken(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, a, key)
	err := b.Backend().Release(ctx, key, "00000000000000000000000000000000")
	if !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("release with a wrong token: got %v, want ErrNotHeld", err)
	}
	if err := b.Backend().Renew(ctx, key, "00000000000000000000000000000000", time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("renew with a wrong token: got %v, want ErrNotHeld", err)
	}
	wantNotAcquired(t, ctx, b, key)
	// A holder's token names its own key only: on another key, held or
	// free, on the same backend or another, it releases and renews nothing.
	other := key + "/other"
	lo := mustLock(t, ctx, b, other)
	for name, be := range map[string]driver.Backend{"the holder's backend": a.Backend(), "another backend": b.Backend()} {
		if err := be.Release(ctx, other, l.Token()); !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("%s: release of another key with the holder's token: got %v, want ErrNotHeld", name, err)
		}
		if err := be.Renew(ctx, other, l.Token(), time.Minute); !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("%s: renew of another key with the holder's token: got %v, want ErrNotHeld", name, err)
		}
		if err := be.Release(ctx, key+"/free", l.Token()); !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("%s: release of a free key with the holder's token: got %v, want ErrNotHeld", name, err)
		}
	}
	for k, want := range map[string]*distlock.Lock{key: l, other: lo} {
		if info, err := a.Inspect(ctx, k); err != nil || !info.Held || info.Fence != want.Fence() {
			t.Fatalf("%q after releases by a token of another key: %+v, %v; want held at fence %d", k, info, err, want.Fence())
		}
	}
	if err := lo.Release(ctx); err != nil {
		t.Fatalf("release of the other key by its holder: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release by the holder after a foreign attempt: %v", err)
	}
}

func (s *suite) staleRelease(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b, c := s.client(t), s.client(t), s.client(t)
	key := s.key(t)
	old := mustLock(t, ctx, a, key, distlock.WithLease(150*time.Millisecond))
	waitDone(t, old, 5*time.Second, "expiring lock")
	cur := mustLock(t, ctx, b, key)
	// The slow holder wakes up and releases: nothing may change.
	if err := old.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("release of an expired lock: got %v, want ErrLockLost", err)
	}
	if err := a.Backend().Release(ctx, key, old.Token()); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("release by a stale token: got %v, want ErrNotHeld", err)
	}
	wantNotAcquired(t, ctx, c, key)
	info, err := c.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != cur.Fence() {
		t.Fatalf("after a stale release: %+v, want held with fence %d", info, cur.Fence())
	}
	if cur.Err() != nil {
		t.Fatalf("current holder disturbed: %v", cur.Err())
	}
	_ = cur.Release(ctx)
}

// handoff checks the optional Handoff of a backend: the key passes to the
// next token with a higher fence and the next holder's metadata, the old
// token loses all rights, and a stale token can hand nothing over.
func (s *suite) handoff(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	hb, ok := a.Backend().(driver.Handoff)
	if !ok {
		t.Skip("the backend does not implement driver.Handoff")
	}
	key := s.key(t)
	old := mustLock(t, ctx, a, key, distlock.WithOwner("first"))
	defer func() { _ = old.Release(ctx) }()
	next := driver.AcquireRequest{Key: key, Token: "handoff-next-token", TTL: time.Minute, Meta: distlock.Meta{BusinessID: "second"}}
	g, err := hb.Handoff(ctx, key, old.Token(), next)
	if err != nil {
		t.Fatalf("handoff by the holder: %v", err)
	}
	if g.Fence <= old.Fence() {
		t.Fatalf("handed fence %d not above the holder's %d", g.Fence, old.Fence())
	}
	want := func(when string) {
		t.Helper()
		info, err := b.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Held || info.Fence != g.Fence || info.Meta.Owner != "" || info.Meta.BusinessID != "second" {
			t.Fatalf("%s: %+v, want held with fence %d and only the next holder's metadata", when, info, g.Fence)
		}
	}
	want("after the handoff")
	for op, err := range map[string]error{
		"release": a.Backend().Release(ctx, key, old.Token()),
		"renew":   a.Backend().Renew(ctx, key, old.Token(), time.Minute),
		"handoff": func() error {
			_, err := hb.Handoff(ctx, key, old.Token(), driver.AcquireRequest{Key: key, Token: "other", TTL: time.Minute})
			return err
		}(),
	} {
		if !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("%s by the old token: got %v, want ErrNotHeld", op, err)
		}
	}
	want("after the old token's attempts")
	wantNotAcquired(t, ctx, b, key)
	if err := a.Backend().Renew(ctx, key, next.Token, time.Minute); err != nil {
		t.Fatalf("renew by the new token: %v", err)
	}
	if err := a.Backend().Release(ctx, key, next.Token); err != nil {
		t.Fatalf("release by the new token: %v", err)
	}
	l, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("key not free after the new token's release: %v", err)
	}
	if l.Fence() <= g.Fence {
		t.Fatalf("fence %d after the handoff's %d", l.Fence(), g.Fence)
	}
	_ = l.Release(ctx)
}

func (s *suite) leaseExpires(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	const lease = 300 * time.Millisecond
	start := time.Now()
	l := mustLock(t, ctx, a, key, distlock.WithLease(lease))
	wantHeldUntil(t, ctx, b, key, start.Add(lease-drift(lease)))
	l2, err := b.Lock(ctx, key, distlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("no takeover after the lease expired: %v", err)
	}
	defer l2.Release(ctx)
	if waited := time.Since(start); waited < lease-drift(lease) {
		t.Errorf("took over after %v, before the lease of %v ended", waited, lease)
	}
	select {
	case <-l.Done():
	default:
		t.Error("another client acquired before the holder's Done closed")
	}
	if !errors.Is(l.Err(), distlock.ErrLockLost) {
		t.Errorf("expired lock Err = %v, want ErrLockLost", l.Err())
	}
}

func drift(lease time.Duration) time.Duration { return lease/100 + 2*time.Millisecond }

func (s *suite) watchdogKeepsLock(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	// A lease long enough that a loaded machine's pauses do not outlast it:
	// a clean make test lost a 300ms lease with every renewal in time.
	const lease = 500 * time.Millisecond
	l := mustLock(t, ctx, a, key, distlock.WithLease(lease), distlock.WithWatchdog(true))
	for range 8 { // 4 leases
		time.Sleep(lease / 2)
		wantNotAcquired(t, ctx, b, key)
		if err := l.Err(); err != nil {
			t.Fatalf("watchdog lost the lock: %v", err)
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("key not free after release: %v", err)
	}
	_ = l2.Release(ctx)
}

func (s *suite) lostLockReported(t *testing.T) {
	if s.h.DeleteKey == nil {
		t.Skip("the harness has no DeleteKey hook")
	}
	ctx := testContext(t, time.Minute)
	a := s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, a, key, distlock.WithLease(300*time.Millisecond), distlock.WithWatchdog(true))
	s.h.DeleteKey(t, key)
	waitDone(t, l, 3*time.Second, "lock deleted in the store")
	if !errors.Is(l.Err(), distlock.ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", l.Err())
	}
	if !errors.Is(context.Cause(l.Context()), distlock.ErrLockLost) {
		t.Fatalf("Context cause = %v, want ErrLockLost", context.Cause(l.Context()))
	}
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("release of a lost lock: got %v, want ErrLockLost", err)
	}
}

func (s *suite) maxHold(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	// A lease of a second: renewals every third of it survive a store that
	// answers slowly on a busy machine (an emulator), so the loss is the cap.
	l := mustLock(t, ctx, a, key, distlock.WithLease(time.Second), distlock.WithWatchdog(true), distlock.WithMaxHold(2*time.Second))
	waitDone(t, l, 6*time.Second, "lock past max hold")
	if held := l.HeldFor(); held < 1900*time.Millisecond {
		t.Errorf("lost after %v, before max hold", held)
	}
	if err := l.Err(); !errors.Is(err, distlock.ErrLockLost) || !strings.Contains(err.Error(), observe.LossMaxHold) {
		t.Fatalf("Err = %v, want ErrLockLost (%s)", err, observe.LossMaxHold)
	}
	l2, err := b.Lock(ctx, key, distlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("key not free after max hold: %v", err)
	}
	_ = l2.Release(ctx)
}

func (s *suite) lockDelay(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	const lease, delay = 200 * time.Millisecond, 500 * time.Millisecond
	start := time.Now()
	l := mustLock(t, ctx, a, key, distlock.WithLease(lease), distlock.WithLockDelay(delay))
	waitDone(t, l, 3*time.Second, "holder's own validity")
	// The holder vanished: the store still keeps the key.
	wantHeldUntil(t, ctx, b, key, start.Add(lease+delay-drift(lease+delay)))
	l2, err := b.Lock(ctx, key, distlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("no takeover after lease+delay: %v", err)
	}
	if waited := time.Since(start); waited < lease+delay-drift(lease+delay) {
		t.Errorf("took over after %v, before lease+delay %v", waited, lease+delay)
	}
	// A clean release frees the key at once despite the delay.
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3 := mustLock(t, ctx, a, key, distlock.WithLockDelay(time.Minute))
	if err := l3.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l4, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("key not free after a clean release with lock-delay: %v", err)
	}
	_ = l4.Release(ctx)
}

func (s *suite) tryLockHeld(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, a, key)
	defer l.Release(ctx)
	start := time.Now()
	wantNotAcquired(t, ctx, b, key)
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("TryLock on a held key took %v; it must not wait", d)
	}
}

func (s *suite) waitTimeout(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, a, key)
	defer l.Release(ctx)
	const wait = 300 * time.Millisecond
	start := time.Now()
	_, err := b.Lock(ctx, key, distlock.WithWait(wait))
	took := time.Since(start)
	if !errors.Is(err, distlock.ErrNotAcquired) {
		select {
		case <-l.Done(): // the store ended the holder's lease or session
			t.Fatalf("got %v, want ErrNotAcquired; the holder had lost the key: %v", err, l.Err())
		default:
			t.Fatalf("got %v while another client held the key, want ErrNotAcquired", err)
		}
	}
	if took < wait || took > wait+time.Second {
		t.Fatalf("wait of %v returned after %v", wait, took)
	}
	// Waits that end as the store gives up their attempt, again and again:
	// none may come back as a grant of the held key.
	for i, start := 0, time.Now(); i < 100 && time.Since(start) < 2*time.Second; i++ {
		short := time.Duration(1+i%5) * time.Millisecond
		if l2, err := b.Lock(ctx, key, distlock.WithWait(short)); !errors.Is(err, distlock.ErrNotAcquired) {
			if err == nil {
				t.Fatalf("wait %d of %v: granted the key another client holds (fence %d, holder's %d)", i, short, l2.Fence(), l.Fence())
			}
			t.Fatalf("wait %d of %v: got %v, want ErrNotAcquired", i, short, err)
		} else if f := storeFailure(err); f != nil {
			t.Fatalf("wait %d of %v: %v: the store's failure %q is joined, but the store did not fail: the wait's own end cut its attempt short", i, short, err, f)
		}
	}
}

// storeFailure returns the part of err, a wait's ErrNotAcquired, that says
// the store failed, as a caller reads it (distlock run's exit code does):
// nil if err is only ErrNotAcquired joined with the wait's context error.
func storeFailure(err error) error {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return nil
	}
	for _, e := range joined.Unwrap() {
		switch {
		case e == nil, e == context.DeadlineExceeded, e == context.Canceled, errors.Is(e, distlock.ErrNotAcquired):
		default:
			return e
		}
	}
	return nil
}

func (s *suite) waitWokenOnRelease(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a := s.client(t)
	key := s.key(t)
	var wakes, releases []time.Duration
	for range 8 {
		l := mustLock(t, ctx, a, key)
		type result struct {
			l   *distlock.Lock
			at  time.Time
			err error
		}
		seen := newStartSeen()
		bb := s.h.NewBackend(t)
		b := distlock.New(bb, distlock.WithObserver(seen))
		got := make(chan result, 1)
		go func() {
			l2, err := b.Lock(ctx, key, distlock.WithWait(10*time.Second))
			got <- result{l2, time.Now(), err}
		}()
		seen.queued(t, isWaiter(bb))
		// Not synchronisation: the waiter waits; give any poll time to back
		// off, so that only a notice from the store can wake it in time.
		time.Sleep(250 * time.Millisecond)
		released := time.Now()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		releases = append(releases, time.Since(released))
		r := <-got
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		wakes = append(wakes, r.at.Sub(released))
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// Released after a wait, the key is free to every client at once:
		// nothing the wait left behind holds it.
		l3, err := a.TryLock(ctx, key)
		if err != nil {
			t.Fatalf("a try right after the waiter released: %v", err)
		}
		if err := l3.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
	s.checkWakes(t, "handoff after a release", wakes, releases)
}

// checkWakes fails t unless the waits between a release and the waiter's
// grant (wakes) show a notice from the store: their median under a bound
// (a poll would be slow in most rounds), and none over a second beyond it
// (a lost notice). The bound is NotifyLatency plus twice the median time
// the releases took, since a loaded machine slows the notice and the
// waiter's grant as much as the release; the median, not the slowest, is
// held to it, so that one slowed round is not taken for a poll.
func (s *suite) checkWakes(t *testing.T, what string, wakes, releases []time.Duration) {
	t.Helper()
	slices.Sort(wakes)
	slices.Sort(releases)
	median, slowest := wakes[len(wakes)/2], wakes[len(wakes)-1]
	bound := s.h.NotifyLatency + 2*releases[len(releases)/2]
	t.Logf("%s: median %v, slowest %v over %d rounds; releases took %v at the median", what, median, slowest, len(wakes), releases[len(releases)/2])
	if median > bound || slowest > bound+time.Second {
		t.Fatalf("%s: median %v, slowest %v over %d rounds; want the median under %v and none over %v: waiters must be woken by the store, not a poll interval",
			what, median, slowest, len(wakes), bound, bound+time.Second)
	}
}

func (s *suite) contextCancel(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	l := mustLock(t, ctx, a, key)
	defer l.Release(ctx)
	wctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := b.Lock(wctx, key)
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want ErrNotAcquired joined with context.Canceled", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("cancelled wait returned after %v", took)
	}
	// The abandoned waiter must not have left anything that blocks the key.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("key not free after a cancelled waiter and a release: %v", err)
	}
	_ = l2.Release(ctx)
}

func (s *suite) reentrancy(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	owner := distlock.ContextWithOwner(ctx, "worker-1")
	l1 := mustLock(t, owner, a, key, distlock.Reentrant())
	l2, err := a.TryLock(owner, key, distlock.Reentrant())
	if err != nil {
		t.Fatalf("reentrant lock by the same owner: %v", err)
	}
	if l2.Token() != l1.Token() || l2.Fence() != l1.Fence() {
		t.Fatal("reentrant handle does not share the acquisition")
	}
	other := distlock.ContextWithOwner(ctx, "worker-2")
	wantNotAcquired(t, other, a, key)
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wantNotAcquired(t, ctx, b, key) // one count left
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("key not free after the last reentrant release: %v", err)
	}
	_ = l3.Release(ctx)
}

func (s *suite) do(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a, b := s.client(t), s.client(t)
	key := s.key(t)
	boom := errors.New("boom")
	err := a.Do(ctx, key, func(ctx context.Context, l *distlock.Lock) error {
		if ctx.Err() != nil || l.Err() != nil {
			t.Error("Do ran fn without the lock")
		}
		wantNotAcquired(t, ctx, b, key)
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	l, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("Do did not release: %v", err)
	}
	_ = l.Release(ctx)
}

// listShowsOnlyLocks: List reports locks only, never the entries the
// backend keeps for semaphores or read-write locks, which are no lock's and
// whose internal names are no valid key.
func (s *suite) listShowsOnlyLocks(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a := s.client(t)
	if _, ok := a.Backend().(driver.Lister); !ok {
		t.Skip("the backend does not list")
	}
	prefix := s.key(t)
	l := mustLock(t, ctx, a, prefix+"/lock")
	defer l.Release(ctx)
	if sem, err := a.Semaphore(prefix+"/sem", 2); err == nil {
		p, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
		if _, ok := a.Backend().(driver.WeightedPermits); ok {
			// A waiting request's intent, kept while it is listed.
			const intent = "listed-intent"
			_, err := sem.AcquireTokenN(ctx, 2, "token-of-a-waiting-request", distlock.WithPermitIntent(intent), distlock.WithWait(0))
			if !errors.Is(err, distlock.ErrNotAcquired) {
				t.Fatalf("2 of 2 permits beside a holder: %v, want ErrNotAcquired", err)
			}
			defer sem.WithdrawIntent(ctx, intent)
		}
	}
	if m, err := a.RWMutex(prefix + "/rw"); err == nil {
		r, err := m.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release(ctx)
		// A writer that waits keeps its intent in the store meanwhile.
		wctx, stop := context.WithCancel(ctx)
		waited := make(chan struct{})
		go func() {
			defer close(waited)
			if w, err := m.Lock(wctx, distlock.WithWait(time.Minute)); err == nil {
				_ = w.Release(ctx)
			}
		}()
		defer func() { stop(); <-waited }()
		time.Sleep(200 * time.Millisecond) // its first attempts
	}
	infos, err := a.List(ctx, prefix+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != l.Key() {
		t.Fatalf("List(%q) = %+v, want the lock %q alone", prefix+"/", infos, l.Key())
	}
	all, err := a.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range all {
		if err := distlock.ValidateKey(info.Key); err != nil {
			t.Fatalf("List(\"\") reports %q, which is no lock's key: %v", info.Key, err)
		}
	}
}

// listPages: ListPage pages through the held locks under a prefix in byte
// order, as strings.Compare orders keys, whatever order the store's
// collation or encoding would give (uppercase before lowercase, every ASCII
// byte before a byte of 0x80 or more, U+FB00 before U+1F600, which UTF-16
// puts the other way round). A page never shows a key outside the prefix,
// the entry of a waiter, nor a semaphore's or read-write lock's entries. It
// runs through the client, so that a backend without driver.PageLister is
// held to it too, by the client's fallback on List.
func (s *suite) listPages(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a := s.client(t)
	base := s.key(t)
	if _, ok := a.Backend().(driver.Lister); !ok {
		if _, err := a.ListPage(ctx, base, "", 2); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("ListPage on a backend that does not list: %v, want errors.ErrUnsupported", err)
		}
		t.Skip("the backend does not list")
	}
	prefix := base + "/"
	names := []string{"B", "a", "z", "\ufb00", "\U0001f600"} // in byte order
	keys := make([]string, len(names))
	for i, n := range names {
		keys[i] = prefix + n
	}
	h := s.client(t) // another client holds them, which a knows of from the store only
	for _, i := range []int{3, 0, 4, 2, 1} {
		l := mustLock(t, ctx, h, keys[i])
		defer l.Release(ctx)
	}
	// Outside the prefix, after every key in it.
	outside := mustLock(t, ctx, a, base+"~")
	defer outside.Release(ctx)
	if sem, err := a.Semaphore(prefix+"sem", 2); err == nil {
		p, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Release(ctx)
	}
	if m, err := a.RWMutex(prefix + "rw"); err == nil {
		r, err := m.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release(ctx)
	}
	// A waiter in line for the third key.
	seen := newStartSeen()
	wb := s.h.NewBackend(t)
	w := distlock.New(wb, distlock.WithObserver(seen))
	waited := make(chan error, 1)
	go func() {
		l, err := w.Lock(ctx, keys[2], distlock.WithWait(time.Minute))
		if err == nil {
			_ = l.Release(ctx)
			err = errors.New("the waiter got the key while it was held")
		}
		waited <- err
	}()
	stopWaiter := sync.OnceValue(func() error {
		_ = w.Close()
		return <-waited
	})
	t.Cleanup(func() { _ = stopWaiter() })
	seen.queued(t, isWaiter(wb))

	// page returns the keys of a page, without the prefix where they have it.
	page := func(after string, limit int) []string {
		t.Helper()
		infos, err := a.ListPage(ctx, prefix, after, limit)
		if err != nil {
			t.Fatalf("ListPage(%q, %q, %d): %v", prefix, after, limit, err)
		}
		var got []string
		for _, in := range infos {
			if !in.Held {
				t.Errorf("ListPage(%q, %q, %d) reports %q not held", prefix, after, limit, in.Key)
			}
			got = append(got, strings.TrimPrefix(in.Key, prefix))
		}
		return got
	}
	var pages [][]string
	after := ""
	for range len(keys) + 1 {
		got := page(after, 2)
		pages = append(pages, got)
		if len(got) == 0 {
			break
		}
		after = prefix + got[len(got)-1]
	}
	if want := [][]string{names[0:2], names[2:4], names[4:5], nil}; !slices.EqualFunc(pages, want, slices.Equal) {
		t.Fatalf("pages of 2 under %q: %q, want %q", prefix, pages, want)
	}
	// A page may start after a key that is not held, and hold them all.
	if got, want := page(prefix+"b", 2), names[2:4]; !slices.Equal(got, want) {
		t.Fatalf("the page of 2 after %q: %q, want %q", prefix+"b", got, want)
	}
	if got := page("", 10); !slices.Equal(got, names) {
		t.Fatalf("the page of 10 under %q: %q, want %q", prefix, got, names)
	}
	if _, err := a.ListPage(ctx, prefix, "", 0); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("ListPage with a limit of 0: %v, want ErrInvalidOption", err)
	}
	if err := stopWaiter(); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("the waiter: %v, want ErrClosed from its client's Close", err)
	}
}

func (s *suite) inspectAndList(t *testing.T) {
	ctx := testContext(t, time.Minute)
	a := s.client(t)
	prefix := s.key(t)
	k1, k2 := prefix+"/one", prefix+"/two"
	l := mustLock(t, ctx, a, k1, distlock.WithOwner("svc-a"), distlock.WithBusinessID("order-42"),
		distlock.WithMetadata(map[string]string{"region": "eu"}), distlock.WithLease(time.Minute))
	l2 := mustLock(t, ctx, a, k2)
	info, err := a.Inspect(ctx, k1)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != l.Fence() || info.Meta.Owner != "svc-a" || info.Meta.BusinessID != "order-42" || info.Meta.Labels["region"] != "eu" {
		t.Fatalf("Inspect = %+v, want held, fence %d, owner, business id and labels", info, l.Fence())
	}
	if info.TTL <= 0 || info.TTL > time.Minute {
		t.Fatalf("Inspect TTL = %v, want in (0, 1m]", info.TTL)
	}
	if _, ok := a.Backend().(driver.Lister); ok {
		infos, err := a.List(ctx, prefix+"/")
		if err != nil {
			t.Fatal(err)
		}
		if len(infos) != 2 || infos[0].Key != k1 || infos[1].Key != k2 {
			t.Fatalf("List = %+v, want %q and %q", infos, k1, k2)
		}
	}
	_ = l.Release(ctx)
	_ = l2.Release(ctx)
	if info, err := a.Inspect(ctx, k1); err != nil || info.Held {
		t.Fatalf("Inspect after release = %+v, %v; want not held", info, err)
	}
}

// countingBackend counts the calls that reach the backend.
type countingBackend struct {
	driver.Backend
	calls atomic.Int64
}

func (c *countingBackend) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	c.calls.Add(1)
	return c.Backend.Acquire(ctx, r)
}

func (c *countingBackend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	c.calls.Add(1)
	return c.Backend.Renew(ctx, key, token, ttl)
}

func (c *countingBackend) Release(ctx context.Context, key, token string) error {
	c.calls.Add(1)
	return c.Backend.Release(ctx, key, token)
}

func (c *countingBackend) Inspect(ctx context.Context, key string) (distlock.Info, error) {
	c.calls.Add(1)
	return c.Backend.Inspect(ctx, key)
}

func (s *suite) invalidInput(t *testing.T) {
	ctx := testContext(t, time.Minute)
	cb := &countingBackend{Backend: s.h.NewBackend(t)}
	c := distlock.New(cb)
	t.Cleanup(func() { _ = c.Close() })
	key := s.key(t)
	keys := map[string]string{
		"empty":     "",
		"too long":  strings.Repeat("k", distlock.MaxKeyLen+1),
		"NUL":       "a\x00b",
		"newline":   "a\nb",
		"DEL":       "a\x7fb",
		"not UTF-8": "a\xffb",
	}
	for name, k := range keys {
		if _, err := c.TryLock(ctx, k); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("key %s: got %v, want ErrInvalidKey", name, err)
		}
		if _, err := c.Inspect(ctx, k); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("inspect key %s: got %v, want ErrInvalidKey", name, err)
		}
	}
	if s.h.MaxKeyLen < distlock.MaxKeyLen {
		long := strings.Repeat("k", s.h.MaxKeyLen+1)
		if _, err := c.TryLock(ctx, long); !errors.Is(err, distlock.ErrInvalidKey) {
			t.Errorf("a key of %d bytes, over the backend's maximum: got %v, want ErrInvalidKey", len(long), err)
		}
	}
	if _, err := c.TryLock(ctx, strings.Repeat("k", s.h.MaxKeyLen)); err != nil {
		t.Errorf("a key of exactly %d bytes: %v", s.h.MaxKeyLen, err)
	}
	cb.calls.Store(0)
	opts := map[string][]distlock.Option{
		"zero lease":              {distlock.WithLease(0)},
		"negative lease":          {distlock.WithLease(-time.Second)},
		"lease under minimum":     {distlock.WithLease(time.Millisecond)},
		"negative wait":           {distlock.WithWait(-2 * time.Second)},
		"renew interval >= lease": {distlock.WithLease(time.Second), distlock.WithWatchdog(true), distlock.WithRenewInterval(time.Second)},
		"negative renew interval": {distlock.WithRenewInterval(-time.Second)},
		"negative max hold":       {distlock.WithMaxHold(-time.Second)},
		"negative lock delay":     {distlock.WithLockDelay(-time.Second)},
		"reentrant without owner": {distlock.Reentrant()},
	}
	for name, o := range opts {
		if _, err := c.Lock(ctx, key, o...); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		} else if !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %q does not name the key", name, err)
		}
	}
	limited := distlock.New(cb, distlock.WithMaxLease(time.Minute))
	if _, err := limited.Lock(ctx, key, distlock.WithLease(time.Hour)); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Errorf("lease over the client maximum: got %v, want ErrInvalidOption", err)
	}
	if n := cb.calls.Load(); n != 0 {
		t.Fatalf("invalid requests made %d backend calls, want 0", n)
	}
}

func (s *suite) afterRelease(t *testing.T) {
	ctx := testContext(t, time.Minute)
	cb := &countingBackend{Backend: s.h.NewBackend(t)}
	c := distlock.New(cb)
	t.Cleanup(func() { _ = c.Close() })
	l := mustLock(t, ctx, c, s.key(t))
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Error("Done not closed after Release")
	}
	before := cb.calls.Load()
	if err := l.Release(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("second release: got %v, want ErrNotHeld", err)
	}
	if err := l.Renew(ctx); !errors.Is(err, distlock.ErrNotHeld) {
		t.Errorf("renew after release: got %v, want ErrNotHeld", err)
	}
	if n := cb.calls.Load() - before; n != 0 {
		t.Errorf("release/renew of a released lock made %d backend calls, want 0", n)
	}
}

func (s *suite) noLeak(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ctx := testContext(t, time.Minute)
	b := s.h.NewBackend(t)
	c := distlock.New(b)
	key := s.key(t)
	// The watchdog has renewed once (at a third of the lease) when the lock
	// is released; the lease outlasts a loaded machine's pauses.
	l := mustLock(t, ctx, c, key, distlock.WithLease(600*time.Millisecond), distlock.WithWatchdog(true))
	held := mustLock(t, ctx, c, key+"/kept") // released by Close
	_ = held
	time.Sleep(250 * time.Millisecond)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(ctx, key+"/kept", distlock.WithWait(50*time.Millisecond)); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("got %v, want ErrNotAcquired", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, ignore)
}
