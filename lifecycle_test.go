package distlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
)

// within runs f and fails the test if it has not returned after d: the
// guard for calls that used to block forever.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: still blocked after %v", what, d)
	}
}

func TestRenewIntervalBounds(t *testing.T) {
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	for _, d := range []time.Duration{time.Nanosecond, 500 * time.Microsecond, distlock.MinRenewInterval - 1} {
		if _, err := c.TryLock(ctx, "k", distlock.WithRenewInterval(d)); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Errorf("renew interval %v: got %v, want ErrInvalidOption", d, err)
		}
	}
}

// TestShortestRenewIntervalRetries renews at the shortest accepted interval
// against a store that refuses to answer: the retry backoff must be valid for
// every accepted interval (it once panicked in the timer goroutine).
func TestShortestRenewIntervalRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := &faulty{Backend: memlock.New()}
		f.renewErr.Store(&errTransient)
		c := distlock.New(f)
		defer c.Close()
		failures := make(chan error, 64)
		l, err := c.TryLock(ctx, "k", distlock.WithLease(distlock.MinLease), distlock.WithWatchdog(true),
			distlock.WithRenewInterval(distlock.MinRenewInterval),
			distlock.OnRenewFailure(func(err error) {
				select {
				case failures <- err:
				default:
				}
			}))
		if err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		if len(failures) == 0 {
			t.Fatal("no renewal was retried before the lock was lost")
		}
		if !errors.Is(l.Err(), distlock.ErrLockLost) {
			t.Fatalf("Err = %v, want ErrLockLost", l.Err())
		}
	})
}

func TestTryLockLeavesCallerOptionsAlone(t *testing.T) {
	ctx := context.Background()
	c := distlock.New(memlock.New())
	defer c.Close()
	opts := make([]distlock.Option, 1, 4) // room that an append would write into
	opts[0] = distlock.WithLease(time.Second)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, err := c.TryLock(ctx, "opts-"+string(rune('a'+i)), opts...); err == nil {
				_ = l.Release(ctx)
			}
		}()
	}
	wg.Wait()
	if spare := opts[1:cap(opts)]; spare[0] != nil {
		t.Fatal("TryLock wrote into the spare capacity of the caller's options")
	}
}

func TestCloseEndsWaits(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	holder := distlock.New(store.Connect())
	defer holder.Close()
	held, err := holder.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)

	waiting := &callSeen{op: "acquire", want: distlock.ErrNotAcquired, seen: make(chan struct{})}
	c := distlock.New(store.Connect(), distlock.WithObserver(waiting))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "k") // no deadline: only Close can end it
		errc <- err
	}()
	select {
	case <-waiting.seen:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never tried the key")
	}
	within(t, 5*time.Second, "Close", func() {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	})
	select {
	case err := <-errc:
		if !errors.Is(err, distlock.ErrClosed) || !strings.Contains(err.Error(), `"k"`) {
			t.Fatalf("wait ended by Close: got %v, want ErrClosed naming the key", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Close returned but the wait goes on")
	}
}

// blockingWaiter is a backend with a native queue in which nobody is ever
// granted: only the end of the wait's context ends AcquireWait.
type blockingWaiter struct {
	driver.Backend
	waiting chan struct{}
}

func (b *blockingWaiter) AcquireWait(ctx context.Context, r driver.AcquireRequest) (driver.Grant, error) {
	b.waiting <- struct{}{}
	<-ctx.Done()
	return driver.Grant{}, errors.Join(driver.ErrNotAcquired, ctx.Err())
}

func TestCloseEndsNativeWaits(t *testing.T) {
	b := &blockingWaiter{Backend: memlock.New(), waiting: make(chan struct{}, 1)}
	c := distlock.New(b)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Lock(context.Background(), "k")
		errc <- err
	}()
	select {
	case <-b.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter never reached the store's queue")
	}
	within(t, 5*time.Second, "Close", func() { _ = c.Close() })
	select {
	case err := <-errc:
		if !errors.Is(err, distlock.ErrClosed) {
			t.Fatalf("native wait ended by Close: got %v, want ErrClosed", err)
		}
	case <-time.After(time.Second):
		t.Fatal("Close returned but the native wait goes on")
	}
}

// hangingRelease is a store whose acquire replies are all lost and whose
// release never answers: the worst case for the cleanups of a closing client.
type hangingRelease struct{ driver.Backend }

func (hangingRelease) Acquire(context.Context, driver.AcquireRequest) (driver.Grant, error) {
	return driver.Grant{}, errTransient
}

func (hangingRelease) Release(ctx context.Context, _, _ string) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestCloseIsNotHeldUpByCleanups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seen := &callSeen{op: "acquire", want: errTransient, seen: make(chan struct{})}
		c := distlock.New(hangingRelease{memlock.New()}, distlock.WithObserver(seen))
		errc := make(chan error, 1)
		go func() {
			_, err := c.Lock(context.Background(), "k")
			errc <- err
		}()
		<-seen.seen
		time.Sleep(100 * time.Millisecond) // more ambiguous attempts, each leaving a cleanup
		at := time.Now()
		_ = c.Close()
		closeTook := time.Since(at)
		if err := <-errc; !errors.Is(err, distlock.ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
		// The cleanups share one budget; none runs inline, one after another.
		if closeTook > distlock.ReleaseBudget {
			t.Fatalf("Close took %v, want at most %v", closeTook, distlock.ReleaseBudget)
		}
	})
}

func TestReleaseGivesUpOnAFailingStore(t *testing.T) {
	ctx := context.Background()
	f := &faulty{Backend: memlock.New()}
	c := distlock.New(f)
	defer c.Close()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	f.releaseFails.Store(1 << 30)
	var relErr error
	within(t, 2*distlock.ReleaseBudget, "Release against a failing store", func() { relErr = l.Release(context.Background()) })
	if !errors.Is(relErr, errTransient) || !strings.Contains(relErr.Error(), "lease") {
		t.Fatalf("got %v, want the store error and a word on the lease that frees the key", relErr)
	}
	if n := f.releases.Load(); n > distlock.ReleaseAttempts {
		t.Fatalf("%d release attempts, want at most %d", n, distlock.ReleaseAttempts)
	}
}

func TestReleaseStopsAtAPermanentError(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	f := &faulty{Backend: store.Connect()}
	c := distlock.New(f)
	defer c.Close()
	l, err := c.TryLock(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Backend.Close() // the backend under the client is gone for good
	within(t, time.Second, "Release on a closed backend", func() { err = l.Release(ctx) })
	if !errors.Is(err, distlock.ErrClosed) {
		t.Fatalf("got %v, want ErrClosed", err)
	}
	if n := f.releases.Load(); n != 1 {
		t.Fatalf("%d release attempts, want 1: a closed backend does not come back", n)
	}
}

func TestCallbacksMayRelease(t *testing.T) {
	t.Run("OnRenewFailure", func(t *testing.T) {
		ctx := context.Background()
		f := &faulty{Backend: memlock.New()}
		f.renewErr.Store(&errTransient)
		c := distlock.New(f)
		defer c.Close()
		released := make(chan error, 1)
		var (
			held atomicLock
			once sync.Once
		)
		l, err := c.TryLock(ctx, "k", distlock.WithLease(time.Second), distlock.WithWatchdog(true),
			distlock.WithRenewInterval(20*time.Millisecond),
			distlock.OnRenewFailure(func(error) {
				l := held.Load()
				if l == nil {
					return
				}
				once.Do(func() {
					_ = l.Err()
					_ = l.Renew(ctx)
					released <- l.Release(ctx)
				})
			}))
		if err != nil {
			t.Fatal(err)
		}
		held.Store(l)
		select {
		case err := <-released:
			if err != nil {
				t.Fatalf("Release from OnRenewFailure: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Release called from OnRenewFailure never returned")
		}
	})
	for _, kind := range []observe.Kind{observe.RenewFailed, observe.Lost} {
		t.Run("Observer/"+kind.String(), func(t *testing.T) {
			ctx := context.Background()
			store := memlock.New()
			f := &faulty{Backend: store.Connect()}
			obs := &releasingObserver{kind: kind, released: make(chan error, 1)}
			c := distlock.New(f, distlock.WithObserver(obs))
			defer c.Close()
			l, err := c.TryLock(ctx, "k", distlock.WithLease(time.Second), distlock.WithWatchdog(true),
				distlock.WithRenewInterval(20*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			obs.lock.Store(l)
			if kind == observe.Lost {
				_, _ = store.ForceRelease(ctx, "k", driver.ForceOptions{}) // the next renewal is refused
			} else {
				f.renewErr.Store(&errTransient)
			}
			select {
			case err := <-obs.released:
				if err != nil && !errors.Is(err, distlock.ErrLockLost) {
					t.Fatalf("Release from the observer: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("Release called by an observer of %s never returned", kind)
			}
		})
	}
}

// releasingObserver releases its lock, and reads its state, from the event
// it waits for.
type releasingObserver struct {
	kind     observe.Kind
	lock     atomicLock
	once     sync.Once
	released chan error
}

func (o *releasingObserver) AcquireStarted(ctx context.Context, _ observe.Event) context.Context {
	return ctx
}

func (o *releasingObserver) Observe(ctx context.Context, e observe.Event) {
	l := o.lock.Load()
	if e.Kind != o.kind || l == nil {
		return
	}
	o.once.Do(func() {
		_ = l.Err()
		o.released <- l.Release(ctx)
	})
}

// atomicLock is set once the lock is returned, read by the observer.
type atomicLock struct {
	mu sync.Mutex
	l  *distlock.Lock
}

func (a *atomicLock) Store(l *distlock.Lock) { a.mu.Lock(); a.l = l; a.mu.Unlock() }
func (a *atomicLock) Load() *distlock.Lock {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.l
}

// callSeen is an Observer that closes seen at the first store call op that
// failed with want.
type callSeen struct {
	op   string
	want error
	once sync.Once
	seen chan struct{}
}

func (o *callSeen) AcquireStarted(ctx context.Context, _ observe.Event) context.Context { return ctx }

func (o *callSeen) Observe(_ context.Context, e observe.Event) {
	if e.Kind == observe.StoreCall && e.Op == o.op && errors.Is(e.Err, o.want) {
		o.once.Do(func() { close(o.seen) })
	}
}

func TestCloseFreesAKeyMaxHoldDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memlock.New()
		c := distlock.New(store.Connect())
		l, err := c.TryLock(ctx, "capped", distlock.WithMaxHold(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		<-l.Done()
		if !strings.Contains(l.Err().Error(), observe.LossMaxHold) {
			t.Fatalf("Err = %v, want a max hold loss", l.Err())
		}
		if err := c.Close(); err != nil { // the holder never called Release
			t.Fatal(err)
		}
		if info, _ := store.Connect().Inspect(ctx, "capped"); info.Held {
			t.Fatal("Close left a key that MaxHold had dropped held in the store")
		}
	})
}

func TestOpenSaysWhatIsWrongWithTheURL(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{"not a url", "127.0.0.1:6379", ""} {
		_, err := distlock.Open(ctx, raw)
		if err == nil || !strings.Contains(err.Error(), "scheme") || strings.Contains(err.Error(), `unknown scheme ""`) {
			t.Errorf("Open(%q) = %v, want an error saying a scheme is needed", raw, err)
		}
	}
	if _, err := distlock.Open(ctx, "nosuch://x"); err == nil || !strings.Contains(err.Error(), "forgotten import") {
		t.Errorf("unknown scheme: %v", err)
	}
}

func TestExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memlock.New()
		c := distlock.New(store.Connect(), distlock.WithMaxLease(time.Minute))
		defer c.Close()
		l, err := c.TryLock(ctx, "k", distlock.WithLease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		before := l.ExpiresAt()
		for _, bad := range []time.Duration{0, -time.Second, distlock.MinLease - 1, 2 * time.Minute} {
			if err := l.Extend(ctx, bad); !errors.Is(err, distlock.ErrInvalidOption) {
				t.Errorf("Extend(%v) = %v, want ErrInvalidOption", bad, err)
			}
		}
		if !l.ExpiresAt().Equal(before) {
			t.Fatal("a refused Extend moved the deadline")
		}
		time.Sleep(500 * time.Millisecond)
		if err := l.Extend(ctx, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if want := time.Now().Add(10*time.Second - 10*time.Second/100 - 2*time.Millisecond); !l.ExpiresAt().Equal(want) {
			t.Fatalf("ExpiresAt = %v, want %v", l.ExpiresAt(), want)
		}
		if info, _ := store.Connect().Inspect(ctx, "k"); info.TTL != 10*time.Second {
			t.Fatalf("store TTL after Extend = %v, want 10s", info.TTL)
		}
		time.Sleep(5 * time.Second) // past the first lease: the new one holds
		if err := l.Err(); err != nil {
			t.Fatalf("lost within the extended lease: %v", err)
		}
		_ = l.Release(ctx)
		if err := l.Extend(ctx, time.Second); !errors.Is(err, distlock.ErrNotHeld) {
			t.Fatalf("Extend after Release = %v, want ErrNotHeld", err)
		}
	})
}

func TestForceRelease(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	rec := &recorder{}
	admin := distlock.New(store.Connect(), distlock.WithObserver(rec))
	holder := distlock.New(store.Connect())
	defer admin.Close()
	defer holder.Close()
	l, err := holder.TryLock(ctx, "stuck", distlock.WithOwner("job-7"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ForceRelease(ctx, "stuck", ""); !errors.Is(err, distlock.ErrInvalidOption) {
		t.Fatalf("force release without a reason: %v, want ErrInvalidOption", err)
	}
	info, err := admin.ForceRelease(ctx, "stuck", "job hung for an hour")
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != l.Fence() || info.Meta.Owner != "job-7" {
		t.Fatalf("force release reported %+v, want the hold it ended", info)
	}
	e, ok := rec.find(observe.ForceReleased)
	if !ok || e.Reason != "job hung for an hour" || e.Key != "stuck" || e.Fence != l.Fence() {
		t.Fatalf("force release event %+v (found %v)", e, ok)
	}
	if _, err := admin.ForceRelease(ctx, "stuck", "again"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("force release of a free key: %v, want ErrNotHeld", err)
	}
	if _, err := admin.ForceRelease(ctx, "", "x"); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Fatalf("force release of an invalid key: %v", err)
	}
	plain := distlock.New(noForce{memlock.New()})
	defer plain.Close()
	if _, err := plain.ForceRelease(ctx, "k", "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("force release without the capability: %v, want ErrUnsupported", err)
	}
}

func TestRequestRelease(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	rec := &recorder{}
	asker := distlock.New(store.Connect())
	holder := distlock.New(store.Connect(), distlock.WithObserver(rec))
	defer asker.Close()
	defer holder.Close()
	l, err := holder.TryLock(ctx, "nightly", distlock.WithOwner("job-7"))
	if err != nil {
		t.Fatal(err)
	}
	for _, reason := range []string{"", "  ", strings.Repeat("x", distlock.MaxRequestReason+1), "\xff"} {
		if _, err := asker.RequestRelease(ctx, "nightly", reason); !errors.Is(err, distlock.ErrInvalidOption) {
			t.Fatalf("request release with reason %q: %v, want ErrInvalidOption", reason, err)
		}
	}
	select {
	case <-l.ReleaseRequested():
		t.Fatal("a refused request reached the holder")
	default:
	}
	info, err := asker.RequestRelease(ctx, "nightly", "deploy")
	if err != nil || info.Fence != l.Fence() || info.Meta.Owner != "job-7" {
		t.Fatalf("request release = %+v, %v; want the hold", info, err)
	}
	<-l.ReleaseRequested()
	if l.ReleaseReason() != "deploy" || l.Err() != nil {
		t.Fatalf("after the request: reason %q, err %v", l.ReleaseReason(), l.Err())
	}
	if e, ok := rec.find(observe.ReleaseRequested); !ok || e.Reason != "deploy" || e.Key != "nightly" || e.Fence != l.Fence() {
		t.Fatalf("release requested event %+v (found %v)", e, ok)
	}
	// A second request changes nothing for the holder.
	if _, err := asker.RequestRelease(ctx, "nightly", "again"); err != nil || l.ReleaseReason() != "deploy" {
		t.Fatalf("second request: %v, reason %q", err, l.ReleaseReason())
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := asker.RequestRelease(ctx, "nightly", "deploy"); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("request release of a free key: %v, want ErrNotHeld", err)
	}
	if _, err := asker.RequestRelease(ctx, "", "x"); !errors.Is(err, distlock.ErrInvalidKey) {
		t.Fatalf("request release of an invalid key: %v", err)
	}
	plain := distlock.New(noForce{memlock.New()})
	defer plain.Close()
	if _, err := plain.RequestRelease(ctx, "k", "x"); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("request release without the capability: %v, want ErrUnsupported", err)
	}
}

// A refused renewal says whether another holder has the key or nobody does.
func TestLossSaysTakenOrDeleted(t *testing.T) {
	ctx := context.Background()
	store := memlock.New()
	holder, operator := distlock.New(store.Connect()), distlock.New(store.Connect())
	defer holder.Close()
	defer operator.Close()
	for _, c := range []struct {
		key, want string
		retake    bool
	}{{"freed", observe.LossDeleted, false}, {"retaken", observe.LossTaken, true}} {
		l, err := holder.TryLock(ctx, c.key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := operator.ForceRelease(ctx, c.key, "test"); err != nil {
			t.Fatal(err)
		}
		if c.retake {
			if _, err := operator.TryLock(ctx, c.key); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Renew(ctx); !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("%s: renew = %v, want ErrLockLost", c.key, err)
		}
		if err := l.Err(); !strings.Contains(err.Error(), "("+c.want+")") {
			t.Errorf("%s: Err = %v, want the reason %s", c.key, err, c.want)
		}
	}
}

// noForce hides every optional capability of a backend.
type noForce struct{ driver.Backend }

func TestFailedShorterExtendCountsWithTheShorterLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := &faulty{Backend: memlock.New()}
		c := distlock.New(f)
		defer c.Close()
		l, err := c.TryLock(ctx, "k", distlock.WithLease(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		f.renewErr.Store(&errTransient) // the reply is lost: the store may have the new TTL
		if err := l.Extend(ctx, time.Second); !errors.Is(err, errTransient) {
			t.Fatalf("Extend = %v, want the store error", err)
		}
		if left := time.Until(l.ExpiresAt()); left > time.Second {
			t.Fatalf("validity after a failed shorter Extend: %v, want at most the shorter lease", left)
		}
	})
}

// gatedRenew records the TTL of each renewal as it completes, and holds the
// first one until gate is closed; firstDone closes once that one completed.
type gatedRenew struct {
	driver.Backend
	entered, gate, firstDone chan struct{}
	first                    sync.Once
	mu                       sync.Mutex
	done                     []time.Duration
}

func (g *gatedRenew) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	held := false
	g.first.Do(func() { held = true })
	if held {
		close(g.entered)
		<-g.gate
	}
	err := g.Backend.Renew(ctx, key, token, ttl)
	g.mu.Lock()
	g.done = append(g.done, ttl)
	g.mu.Unlock()
	if held {
		close(g.firstDone)
	}
	return err
}

// TestExtendWaitsForTheRenewalInFlight: a watchdog renewal sent with the old
// lease must not land after an Extend, or the store would keep the old TTL
// while the client counts with the new lease.
func TestExtendWaitsForTheRenewalInFlight(t *testing.T) {
	ctx := context.Background()
	g := &gatedRenew{Backend: memlock.New(), entered: make(chan struct{}), gate: make(chan struct{}), firstDone: make(chan struct{})}
	c := distlock.New(g)
	defer c.Close()
	l, err := c.TryLock(ctx, "k", distlock.WithLease(time.Second), distlock.WithWatchdog(true),
		distlock.WithRenewInterval(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-g.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the watchdog never renewed")
	}
	extended := make(chan error, 1)
	go func() { extended <- l.Extend(ctx, 5*time.Second) }()
	time.Sleep(50 * time.Millisecond) // not synchronisation: room for an Extend that does not wait
	close(g.gate)
	select {
	case err := <-extended:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Extend never returned")
	}
	select {
	case <-g.firstDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the held renewal never completed")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, ttl := range g.done {
		if ttl == 5*time.Second {
			for _, later := range g.done[i:] {
				if later != 5*time.Second {
					t.Fatalf("renewals completed with TTLs %v: an old lease landed after Extend", g.done)
				}
			}
			return
		}
	}
	t.Fatalf("renewals completed with TTLs %v: Extend's is missing", g.done)
}

// doneWatcher fails the test if the lock's Done is closed while observe.Lost is
// being reported.
type doneWatcher struct {
	recorder
	lock       atomicLock
	doneEarly  atomic.Bool
	sawLossErr atomic.Bool
}

func (w *doneWatcher) Observe(ctx context.Context, e observe.Event) {
	if l := w.lock.Load(); l != nil && e.Kind == observe.Lost {
		select {
		case <-l.Done():
			w.doneEarly.Store(true)
		default:
		}
		w.sawLossErr.Store(errors.Is(l.Err(), distlock.ErrLockLost))
	}
	w.recorder.Observe(ctx, e)
}

// TestLossReportedBeforeDone: a holder that waits on Done and then releases
// is reported lost, then released, in that order, and the loss is counted
// before Release returns.
func TestLossReportedBeforeDone(t *testing.T) {
	for range 20 {
		ctx := context.Background()
		w := &doneWatcher{}
		c := distlock.New(memlock.New(), distlock.WithObserver(w))
		l, err := c.TryLock(ctx, "k", distlock.WithMaxHold(10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		w.lock.Store(l)
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("MaxHold never ended the lock")
		}
		if err := l.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
			t.Fatalf("Release = %v, want ErrLockLost", err)
		}
		kinds := w.kinds()
		if n := len(kinds); n < 2 || kinds[n-2] != observe.Lost || kinds[n-1] != observe.Released {
			t.Fatalf("events %v, want lost, then released, by the time Release returns", kinds)
		}
		if w.doneEarly.Load() || !w.sawLossErr.Load() {
			t.Fatalf("during observe.Lost: Done closed %v, Err reported the loss %v; want false, true", w.doneEarly.Load(), w.sawLossErr.Load())
		}
		_ = c.Close()
	}
}

// renewingObserver calls Extend, once, from the store call of a renewal.
type renewingObserver struct {
	lock     atomicLock
	done     atomic.Bool // not a sync.Once: Extend's own store call comes back here
	extended chan error
}

func (o *renewingObserver) AcquireStarted(ctx context.Context, _ observe.Event) context.Context {
	return ctx
}

func (o *renewingObserver) Observe(ctx context.Context, e observe.Event) {
	l := o.lock.Load()
	if e.Kind != observe.StoreCall || e.Op != "renew" || l == nil {
		return
	}
	if o.done.CompareAndSwap(false, true) {
		o.extended <- l.Extend(ctx, 2*time.Second)
	}
}

// TestStoreCallObserverMayRenew: the store-call event of a renewal comes
// after the renewal let go of the lock's renewals, so an observer may renew.
func TestStoreCallObserverMayRenew(t *testing.T) {
	for _, manual := range []bool{false, true} {
		ctx := context.Background()
		obs := &renewingObserver{extended: make(chan error, 1)}
		c := distlock.New(memlock.New(), distlock.WithObserver(obs))
		l, err := c.TryLock(ctx, "k", distlock.WithLease(time.Second), distlock.WithWatchdog(true),
			distlock.WithRenewInterval(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		obs.lock.Store(l)
		if manual {
			go func() { _ = l.Renew(ctx) }()
		}
		select {
		case err := <-obs.extended:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Extend from the store-call event of a renewal never returned (manual renew %v)", manual)
		}
		_ = l.Release(ctx)
		_ = c.Close()
	}
}
