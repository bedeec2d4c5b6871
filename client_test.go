package distlock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// faulty wraps a real backend and injects failures into chosen calls.
type faulty struct {
	driver.Backend
	acquireAfter func(driver.Grant, error) (driver.Grant, error)
	renewErr     atomic.Pointer[error]
	releaseFails atomic.Int32 // releases that fail without reaching the store
	releaseLost  atomic.Int32 // releases done in the store whose reply is lost
	releases     atomic.Int32
}

func (f *faulty) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	g, err := f.Backend.Acquire(ctx, r)
	if f.acquireAfter != nil {
		return f.acquireAfter(g, err)
	}
	return g, err
}

func (f *faulty) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if p := f.renewErr.Load(); p != nil {
		return *p
	}
	return f.Backend.Renew(ctx, key, token, ttl)
}

func (f *faulty) Release(ctx context.Context, key, token string) error {
	f.releases.Add(1)
	if f.releaseFails.Add(-1) >= 0 {
		return errTransient
	}
	err := f.Backend.Release(ctx, key, token)
	if err == nil && f.releaseLost.Add(-1) >= 0 {
		return errTransient
	}
	return err
}

var errTransient = errors.New("i/o timeout")

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []observe.Event
}

func (r *recorder) AcquireStarted(ctx context.Context, e observe.Event) context.Context {
	r.Observe(ctx, e)
	return ctx
}

func (r *recorder) Observe(_ context.Context, e observe.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) kinds() []observe.Kind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ks []observe.Kind
	for _, e := range r.events {
		if e.Kind != observe.StoreCall {
			ks = append(ks, e.Kind)
		}
	}
	return ks
}

func (r *recorder) find(k observe.Kind) (observe.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Kind == k {
			return e, true
		}
	}
	return observe.Event{}, false
}

func TestAmbiguousAcquireIsReleasedInBackground(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	// The store grants the lock but the reply is lost.
	f := &faulty{Backend: store.Connect(), acquireAfter: func(driver.Grant, error) (driver.Grant, error) {
		return driver.Grant{}, errTransient
	}}
	c := distlock.New(f)
	_, err := c.TryLock(ctx, "amb")
	if !errors.Is(err, errTransient) || !strings.Contains(err.Error(), `"amb"`) {
		t.Fatalf("got %v, want the store error naming the key", err)
	}
	if err := c.Close(); err != nil { // waits for the background release
		t.Fatal(err)
	}
	other := distlock.New(store)
	defer other.Close()
	l, err := other.TryLock(ctx, "amb")
	if err != nil {
		t.Fatalf("the token of an ambiguous acquire was not released: %v", err)
	}
	_ = l.Release(ctx)
}

func TestReleaseRetriedByToken(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	f := &faulty{Backend: store}
	c := distlock.New(f)
	defer c.Close()
	l, err := c.TryLock(ctx, "rel")
	if err != nil {
		t.Fatal(err)
	}
	f.releaseFails.Store(2)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release with two lost replies: %v", err)
	}
	if n := f.releases.Load(); n != 3 {
		t.Fatalf("release attempts = %d, want 3", n)
	}
	if info, _ := store.Inspect(ctx, "rel"); info.Held {
		t.Fatal("key still held after release")
	}
}

// A release whose first attempt freed the key but lost its reply is retried,
// finds the key free within the lease, where only a release could have
// freed it, and reports the key released, not a lease that ran out.
func TestReleaseWithLostReplyWithinLease(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	f := &faulty{Backend: store}
	rec := &recorder{}
	c := distlock.New(f, distlock.WithObserver(rec))
	defer c.Close()
	l, err := c.TryLock(ctx, "lost-reply")
	if err != nil {
		t.Fatal(err)
	}
	f.releaseLost.Store(1)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release whose first reply was lost: %v; want success", err)
	}
	if n := f.releases.Load(); n != 2 {
		t.Fatalf("release attempts = %d, want 2", n)
	}
	if e, ok := rec.find(observe.Released); !ok || e.Reason != observe.ReleaseReleased || e.Err != nil {
		t.Fatalf("release event %+v (found %v); want reason %q without an error", e, ok, observe.ReleaseReleased)
	}
}

// stallsAfterFailing fails the first attempt with errStore at once and
// holds every later one until its context ends: a slow store whose last
// attempt the end of a wait cuts short.
type stallsAfterFailing struct {
	driver.Backend
	calls atomic.Int32
}

var errStore = errors.New("the row of the floor is missing")

func (s *stallsAfterFailing) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	if s.calls.Add(1) == 1 {
		return driver.Grant{}, errStore
	}
	<-ctx.Done()
	return driver.Grant{}, ctx.Err()
}

// A wait that ends while an attempt is in flight names the last store
// failure it met, not the deadline that cut that attempt short.
func TestWaitNamesLastStoreFailure(t *testing.T) {
	c := distlock.New(&stallsAfterFailing{Backend: memlock.New()})
	defer c.Close()
	_, err := c.Lock(context.Background(), "k", distlock.WithWait(200*time.Millisecond))
	if !errors.Is(err, distlock.ErrNotAcquired) || !errors.Is(err, errStore) {
		t.Fatalf("wait that ended during an attempt: %v; want ErrNotAcquired naming %q", err, errStore)
	}
}

func TestTransientRenewFailureIsNotLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := &faulty{Backend: memlock.New()}
		rec := &recorder{}
		c := distlock.New(f, distlock.WithObserver(rec))
		defer c.Close()
		var failures atomic.Int32
		l, err := c.TryLock(ctx, "flaky", distlock.WithLease(3*time.Second), distlock.WithWatchdog(true),
			distlock.OnRenewFailure(func(error) { failures.Add(1) }))
		if err != nil {
			t.Fatal(err)
		}
		f.renewErr.Store(&errTransient)
		time.Sleep(1500 * time.Millisecond) // one failed renewal at 1s, validity lasts to ~2.97s
		if l.Err() != nil {
			t.Fatalf("lost on a transient failure: %v", l.Err())
		}
		if failures.Load() == 0 {
			t.Fatal("OnRenewFailure not called")
		}
		if _, ok := rec.find(observe.RenewFailed); !ok {
			t.Fatal("no renew_failed event")
		}
		f.renewErr.Store(nil)
		time.Sleep(3 * time.Second)
		if l.Err() != nil {
			t.Fatalf("lost after renewals recovered: %v", l.Err())
		}
		_ = l.Release(ctx)
	})
}

func TestUnreachableStoreLosesLockBeforeExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memlock.New()
		f := &faulty{Backend: store}
		c := distlock.New(f)
		defer c.Close()
		const lease = time.Second
		l, err := c.TryLock(ctx, "cut", distlock.WithLease(lease), distlock.WithWatchdog(true))
		if err != nil {
			t.Fatal(err)
		}
		f.renewErr.Store(&errTransient)
		<-l.Done()
		if !errors.Is(l.Err(), distlock.ErrLockLost) || !strings.Contains(l.Err().Error(), observe.LossUnreachable) {
			t.Fatalf("Err = %v, want ErrLockLost (unreachable)", l.Err())
		}
		// The holder knew before the store let anyone else in.
		if info, _ := store.Inspect(ctx, "cut"); !info.Held {
			t.Fatal("the store expired the key before the holder was told")
		}
	})
}

func TestGrantLostSignal(t *testing.T) {
	ctx := context.Background()
	lost, lose := context.WithCancel(context.Background())
	f := &faulty{Backend: memlock.New(), acquireAfter: func(g driver.Grant, err error) (driver.Grant, error) {
		g.Lost = lost
		return g, err
	}}
	c := distlock.New(f)
	defer c.Close()
	l, err := c.TryLock(ctx, "session")
	if err != nil {
		t.Fatal(err)
	}
	lose()
	<-l.Done()
	if !strings.Contains(l.Err().Error(), observe.LossStoreDeleted) {
		t.Fatalf("Err = %v, want %s", l.Err(), observe.LossStoreDeleted)
	}
}

func TestValidityCountsFromGrantSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		sent := time.Now().Add(-400 * time.Millisecond)
		f := &faulty{Backend: memlock.New(), acquireAfter: func(g driver.Grant, err error) (driver.Grant, error) {
			g.Sent = sent
			return g, err
		}}
		c := distlock.New(f)
		defer c.Close()
		l, err := c.TryLock(ctx, "sent", distlock.WithLease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		want := sent.Add(time.Second - time.Second/100 - 2*time.Millisecond)
		if !l.ExpiresAt().Equal(want) {
			t.Fatalf("ExpiresAt = %v, want %v", l.ExpiresAt(), want)
		}
		_ = l.Release(ctx)
	})
}

// A grant that comes back after its validity, on a slow machine or link,
// is released and tried again while the caller's wait lasts, with a fresh
// token; without a wait it is not acquired.
func TestLateGrantRetriedWithinWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var late atomic.Int32
		log := &acquireLog{Backend: &faulty{Backend: memlock.New(), acquireAfter: func(g driver.Grant, err error) (driver.Grant, error) {
			if err == nil && late.Add(-1) >= 0 {
				g.Sent = time.Now().Add(-2 * time.Second) // sent longer ago than the lease
			}
			return g, err
		}}}
		c := distlock.New(log)
		defer c.Close()
		late.Store(1)
		if _, err := c.TryLock(ctx, "late", distlock.WithLease(time.Second)); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryLock granted late: %v, want ErrNotAcquired", err)
		}
		late.Store(2)
		log.tokens = nil
		l, err := c.Lock(ctx, "late/2", distlock.WithLease(time.Second), distlock.WithWait(5*time.Second))
		if err != nil {
			t.Fatalf("Lock with a wait after two late grants: %v", err)
		}
		if tk := log.tokens; len(tk) != 3 || tk[0] == tk[1] || tk[1] == tk[2] || l.Token() != tk[2] {
			t.Errorf("tokens asked for %q, holding %q: want three attempts, each with a fresh token", tk, l.Token())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		late.Store(1 << 30)
		if _, err := c.Lock(ctx, "late/3", distlock.WithLease(time.Second), distlock.WithWait(5*time.Second)); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("Lock whose every grant is late: %v, want ErrNotAcquired once the wait ends", err)
		}
	})
}

// acquireLog records the token of every Acquire, in order; the test reads
// it while no call is in flight.
type acquireLog struct {
	driver.Backend
	tokens []string
}

func (a *acquireLog) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	a.tokens = append(a.tokens, r.Token)
	return a.Backend.Acquire(ctx, r)
}

func TestDoReportsLossDuringWork(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	c := distlock.New(store)
	defer c.Close()
	err := c.Do(ctx, "do-lost", func(ctx context.Context, l *distlock.Lock) error {
		_, _ = store.ForceRelease(ctx, "do-lost", driver.ForceOptions{})
		<-ctx.Done() // the watchdog notices at its next renewal
		if !errors.Is(context.Cause(ctx), distlock.ErrLockLost) {
			t.Errorf("fn context cause = %v, want ErrLockLost", context.Cause(ctx))
		}
		return nil
	}, distlock.WithLease(150*time.Millisecond), distlock.WithWatchdog(true))
	if !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("Do = %v, want ErrLockLost", err)
	}
}

func TestObserverSeesLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		rec := &recorder{}
		c := distlock.New(memlock.New(), distlock.WithObserver(rec))
		defer c.Close()
		l, err := c.Lock(ctx, "obs", distlock.WithLease(300*time.Millisecond), distlock.WithWatchdog(true),
			distlock.WithOwner("svc"), distlock.WithBusinessID("order-1"))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		want := []observe.Kind{observe.AcquireStart, observe.Acquired, observe.Renewed, observe.Released}
		if got := rec.kinds(); !equalKinds(got, want) {
			t.Fatalf("events %v, want %v", got, want)
		}
		e, _ := rec.find(observe.Released)
		if e.Key != "obs" || e.Owner != "svc" || e.BusinessID != "order-1" || e.Backend != "mem" || e.Reason != observe.ReleaseReleased || e.Fence != l.Fence() {
			t.Fatalf("release event %+v", e)
		}
		if e.TokenID == "" || strings.Contains(l.Token(), e.TokenID) {
			t.Fatalf("token id %q must be a short hash, not part of the token", e.TokenID)
		}
		if _, ok := rec.find(observe.StoreCall); !ok {
			t.Fatal("no store_call event")
		}
	})
}

func equalKinds(a, b []observe.Kind) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

type policyFunc func(ctx context.Context, r *distlock.Request) error

func (f policyFunc) Apply(ctx context.Context, r *distlock.Request) error { return f(ctx, r) }

func TestPolicyRunsBeforeTheStore(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	c := distlock.New(store, distlock.WithPolicy(policyFunc(func(_ context.Context, r *distlock.Request) error {
		if strings.HasPrefix(r.Key, "batch/") {
			return distlock.ErrDegraded
		}
		r.Lease = 0 // a broken policy is still caught by validation
		return nil
	})))
	defer c.Close()
	if _, err := c.TryLock(ctx, "batch/x"); !errors.Is(err, distlock.ErrDegraded) || !strings.Contains(err.Error(), "batch/x") {
		t.Fatalf("got %v, want ErrDegraded naming the key", err)
	}
	if _, err := c.TryLock(ctx, "other"); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("got %v, want ErrInvalidOption", err)
	}
	if infos, _ := store.List(ctx, ""); len(infos) != 0 {
		t.Fatalf("refused requests reached the store: %v", infos)
	}
}

func TestCloseReleasesHeldLocks(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	c := distlock.New(store)
	l, err := c.TryLock(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if info, _ := store.Inspect(ctx, "kept"); info.Held {
		t.Fatal("Close left a lock held")
	}
	if !errors.Is(l.Err(), distlock.ErrNotHeld) {
		t.Fatalf("Err after Close = %v, want ErrNotHeld", l.Err())
	}
	if _, err := c.TryLock(ctx, "after"); !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("TryLock after Close: got %v, want ErrClosed", err)
	}
}

func TestOpenRegistry(t *testing.T) {
	ctx := context.Background()
	if _, err := distlock.Open(ctx, "nosuch://x"); err == nil || !strings.Contains(err.Error(), "forgotten import") {
		t.Fatalf("unknown scheme: %v", err)
	}
	a, err := distlock.Open(ctx, "mem://shared-test")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, _ := distlock.Open(ctx, "mem://shared-test")
	defer b.Close()
	l, err := a.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "k"); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("named stores are not shared: %v", err)
	}
	_ = l.Release(ctx)

	defer func() {
		if recover() == nil {
			t.Fatal("duplicate Register did not panic")
		}
	}()
	distlock.Register("mem", func(context.Context, *url.URL) (driver.Backend, error) { return nil, nil })
}

func TestNewNilBackendPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic")
		}
	}()
	distlock.New(nil)
}

func TestLocalWaitersServedInArrivalOrder(t *testing.T) {
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	holder, err := c.TryLock(ctx, "line")
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	order := make(chan int, waiters)
	errs := make(chan error, waiters)
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctx, "line", distlock.WithWait(10*time.Second))
			if err != nil {
				errs <- err
				return
			}
			order <- i
			// Come straight back for the key: the line must not let us barge.
			if err := l.Release(ctx); err != nil {
				errs <- err
			}
		}()
		waitForLine(t, c, "line", i+1) // join the line in index order
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(order)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("grant %d went to waiter %d: not arrival order", want, got)
		}
		want++
	}
	if want != waiters {
		t.Fatalf("%d of %d waiters got the lock", want, waiters)
	}
}

// waitForLine waits, within 5s, until n of c's waiters are in key's line.
func waitForLine(t *testing.T, c *distlock.Client, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for distlock.WaitersInLine(c, key) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters in line for %q after 5s, want %d", distlock.WaitersInLine(c, key), key, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestDoReleasesOnPanic(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	c := distlock.New(store)
	defer c.Close()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not propagate")
			}
		}()
		_ = c.Do(ctx, "do-panic", func(context.Context, *distlock.Lock) error { panic("boom") })
	}()
	if info, _ := store.Inspect(ctx, "do-panic"); info.Held {
		t.Fatal("a panicking fn left the key held")
	}
}

func TestRetryAfterAmbiguousAcquireUsesAFreshToken(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	var calls atomic.Int32
	firstToken := make(chan string, 1)
	f := &faulty{Backend: store.Connect()}
	f.acquireAfter = func(g driver.Grant, err error) (driver.Grant, error) {
		if calls.Add(1) == 1 { // granted in the store, but the reply is lost
			return driver.Grant{}, errTransient
		}
		return g, err
	}
	spy := &tokenSpy{faulty: f, first: firstToken, firstReleased: make(chan struct{})}
	c := distlock.New(spy)
	l, err := c.Lock(ctx, "amb-wait", distlock.WithWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() == <-firstToken {
		t.Fatal("the retry reused the token of the ambiguous attempt")
	}
	select {
	case <-spy.firstReleased:
	case <-time.After(5 * time.Second):
		t.Fatal("the first token was never released in the background")
	}
	if err := store.Renew(ctx, "amb-wait", l.Token(), time.Minute); err != nil {
		t.Fatalf("the background release removed the new grant: %v", err)
	}
	_ = l.Release(ctx)
	_ = c.Close()
}

// tokenSpy records the token of the first acquisition attempt and closes
// firstReleased once a release of that token returned.
type tokenSpy struct {
	*faulty
	first         chan string
	firstReleased chan struct{}
	once, relOnce sync.Once
	token         atomic.Pointer[string]
}

func (s *tokenSpy) Acquire(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	s.once.Do(func() {
		s.token.Store(&r.Token)
		s.first <- r.Token
	})
	return s.faulty.Acquire(ctx, r)
}

func (s *tokenSpy) Release(ctx context.Context, key, token string) error {
	err := s.faulty.Release(ctx, key, token)
	if p := s.token.Load(); p != nil && *p == token {
		s.relOnce.Do(func() { close(s.firstReleased) })
	}
	return err
}

// handoffLog wraps memlock and records, in order, the calls that free a key:
// "handoff" or "release".
type handoffLog struct {
	*memlock.Backend
	mu    sync.Mutex
	calls []string
}

func (h *handoffLog) note(op string) {
	h.mu.Lock()
	h.calls = append(h.calls, op)
	h.mu.Unlock()
}

func (h *handoffLog) Release(ctx context.Context, key, token string) error {
	h.note("release")
	return h.Backend.Release(ctx, key, token)
}

func (h *handoffLog) Handoff(ctx context.Context, key, token string, next driver.AcquireRequest) (driver.Grant, error) {
	h.note("handoff")
	return h.Backend.Handoff(ctx, key, token, next)
}

func TestReleaseHandsKeyToLocalWaiter(t *testing.T) {
	ctx := context.Background()
	store := &handoffLog{Backend: memlock.New()}
	c := distlock.New(store)
	defer c.Close()
	holder, err := c.TryLock(ctx, "k", distlock.WithOwner("first"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *distlock.Lock, 1)
	go func() {
		l, err := c.Lock(ctx, "k", distlock.WithWait(5*time.Second), distlock.WithOwner("second"))
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	waitForLine(t, c, "k", 1)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next == nil {
		t.Fatal("the waiter did not get the key")
	}
	defer next.Release(ctx)
	info, err := store.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case next.Token() == holder.Token():
		t.Fatal("the waiter got the holder's token")
	case next.Fence() <= holder.Fence():
		t.Fatalf("handed fence %d not above %d", next.Fence(), holder.Fence())
	case !info.Held || info.Fence != next.Fence() || info.Meta.Owner != "second":
		t.Fatalf("store holds %+v, want the waiter's grant", info)
	}
	if err := store.Backend.Release(ctx, "k", holder.Token()); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("the old token still frees the key: %v", err)
	}
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.calls) != 1 || store.calls[0] != "handoff" {
		t.Fatalf("calls that freed the key: %v, want one handoff", store.calls)
	}
}

func TestHandoffsYieldToOtherClients(t *testing.T) {
	ctx := context.Background()
	store := &handoffLog{Backend: memlock.New()}
	c := distlock.New(store)
	defer c.Close()
	// Four goroutines of one client keep coming back for the key, so its
	// line is never empty; a real release must still come every so often.
	const rounds = 40
	var wg sync.WaitGroup
	var next atomic.Int32
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= rounds {
				l, err := c.Lock(ctx, "k", distlock.WithWait(10*time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	store.mu.Lock()
	defer store.mu.Unlock()
	run, handoffs := 0, 0
	for _, op := range store.calls {
		if op == "release" {
			run = 0
			continue
		}
		handoffs++
		if run++; run > 16 {
			t.Fatalf("more than 16 handoffs in a row: %v", store.calls)
		}
	}
	if handoffs == 0 {
		t.Fatalf("no handoff among %v", store.calls)
	}
}

// TestHoldsShareOneSchedule checks the client's one timer for all holds:
// leases taken in any order expire in deadline order, each at its own
// deadline; a released hold never fires; a watchdog renews through it.
func TestHoldsShareOneSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := distlock.New(memlock.New())
		defer c.Close()
		start := time.Now()
		leases := []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, 200 * time.Millisecond}
		locks := make([]*distlock.Lock, len(leases))
		for i, d := range leases {
			l, err := c.TryLock(ctx, fmt.Sprintf("k%d", i), distlock.WithLease(d))
			if err != nil {
				t.Fatal(err)
			}
			locks[i] = l
		}
		renewed, err := c.TryLock(ctx, "renewed", distlock.WithLease(150*time.Millisecond), distlock.WithWatchdog(true))
		if err != nil {
			t.Fatal(err)
		}
		if err := locks[3].Release(ctx); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{1, 0, 2} {
			<-locks[i].Done()
			took := time.Since(start)
			want := leases[i] - leases[i]/100 - 2*time.Millisecond
			if took != want {
				t.Fatalf("lock %d (lease %v) lost after %v, want %v", i, leases[i], took, want)
			}
			if !errors.Is(locks[i].Err(), distlock.ErrLockLost) {
				t.Fatalf("lock %d: Err = %v, want ErrLockLost", i, locks[i].Err())
			}
		}
		if !errors.Is(locks[3].Err(), distlock.ErrNotHeld) {
			t.Fatalf("released lock: Err = %v, want ErrNotHeld", locks[3].Err())
		}
		if err := renewed.Err(); err != nil {
			t.Fatalf("watchdog lock lost after %v: %v", time.Since(start), err)
		}
		_ = renewed.Release(ctx)
	})
}

// An error of a semaphore's or a read-write lock's acquisition names what
// was attempted, not "lock", which would send its reader to the wrong
// primitive.
func TestAcquireErrorsNameThePrimitive(t *testing.T) {
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	sem, err := c.Semaphore("exports", 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sem.TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	rw, err := c.RWMutex("catalog")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rw.TryLock(ctx); err != nil {
		t.Fatal(err)
	}
	for want, try := range map[string]func() error{
		`distlock: acquire permit "exports": `: func() error { _, err := sem.TryAcquire(ctx); return err },
		`distlock: read-lock "catalog": `:      func() error { _, err := rw.TryRLock(ctx); return err },
		`distlock: write-lock "catalog": `:     func() error { _, err := rw.TryLock(ctx); return err },
	} {
		if err := try(); !errors.Is(err, distlock.ErrNotAcquired) || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("got %v, want ErrNotAcquired beginning %q", err, want)
		}
	}
}
