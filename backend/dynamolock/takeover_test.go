package dynamolock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/dynamolock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/telemetry"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// manualClock is a clock that moves only when told, from now.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock { return &manualClock{t: time.Now()} }

func (c *manualClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestTakeoverAfterFullLeaseOfUnchangedVersion: a waiter takes over a key
// whose holder stopped renewing only once it has seen the same record
// version for a full lease by its own clock; a renewal in between starts
// its count again, and the holder can neither renew nor release after the
// takeover.
func TestTakeoverAfterFullLeaseOfUnchangedVersion(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	clk := newManualClock()
	holder, waiter := st.open(t), st.open(t, dynamolock.WithClock(clk.now))
	const lease = 10 * time.Second
	req := driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: lease}
	g, err := holder.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mine := driver.AcquireRequest{Key: req.Key, Token: token(), TTL: lease}
	refused := func(when string) {
		t.Helper()
		if _, err := waiter.Acquire(ctx, mine); !errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("%s: got %v, want ErrNotAcquired", when, err)
		}
	}
	refused("first sight of the holder's version")
	clk.advance(lease - time.Millisecond)
	refused("the same version seen for a lease less 1ms")
	if err := holder.Renew(ctx, req.Key, req.Token, lease); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Millisecond)
	refused("a full lease after the first sight, but the holder renewed")
	clk.advance(lease - time.Millisecond)
	refused("the renewed version seen for a lease less 1ms")
	clk.advance(time.Millisecond)
	g2, err := waiter.Acquire(ctx, mine)
	if err != nil {
		t.Fatalf("the renewed version seen unchanged for a full lease: %v", err)
	}
	if g2.Fence <= g.Fence {
		t.Fatalf("fence after the takeover %d, not above %d", g2.Fence, g.Fence)
	}
	if err := holder.Renew(ctx, req.Key, req.Token, lease); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("renewal by the holder taken over: %v, want ErrNotHeld", err)
	}
	if err := holder.Release(ctx, req.Key, req.Token); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("release by the holder taken over: %v, want ErrNotHeld", err)
	}
	if info, err := holder.Inspect(ctx, req.Key); err != nil || !info.Held || info.Fence != g2.Fence {
		t.Fatalf("after the takeover: %+v, %v; want held at fence %d", info, err, g2.Fence)
	}
}

// TestInspectTTLIsTheObserversOwn: Inspect reports what is left of the
// holder's lease by the inspecting backend's own sighting of the version
// (a full lease before any), not by comparing clocks.
func TestInspectTTLIsTheObserversOwn(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	clk := newManualClock()
	holder, other := st.open(t), st.open(t, dynamolock.WithClock(clk.now))
	req := driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: 10 * time.Second}
	if _, err := holder.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	ttl := func() time.Duration {
		t.Helper()
		info, err := other.Inspect(ctx, req.Key)
		if err != nil || !info.Held {
			t.Fatalf("Inspect: %+v, %v", info, err)
		}
		return info.TTL
	}
	if got := ttl(); got != req.TTL {
		t.Fatalf("TTL before any sighting: %v, want the lease %v", got, req.TTL)
	}
	if _, err := other.Acquire(ctx, driver.AcquireRequest{Key: req.Key, Token: token(), TTL: time.Second}); !errors.Is(err, driver.ErrNotAcquired) {
		t.Fatal(err)
	}
	clk.advance(4 * time.Second)
	if got := ttl(); got != 6*time.Second {
		t.Fatalf("TTL 4s after the sighting: %v, want 6s", got)
	}
	clk.advance(time.Minute)
	if got := ttl(); got != 0 {
		t.Fatalf("TTL past the lease: %v, want 0", got)
	}
}

// skewed returns a clock a fixed offset from the real one. The offset moves
// the time of day only: durations measured on it are real ones.
func skewed(offset time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(offset) }
}

// TestSkewedClocksNeverBothHold: two clients whose clocks are two minutes
// apart (one a minute behind, one a minute ahead) take turns on one key
// with short renewed leases; never are both inside, and one that waits for
// a renewed lock never gets it. Safety that compared the holder's
// wall-clock expiry with the waiter's clock would let the client ahead take
// the lock at once.
func TestSkewedClocksNeverBothHold(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, 2*time.Minute)
	behind := distlock.New(st.open(t, dynamolock.WithClock(skewed(-time.Minute))))
	ahead := distlock.New(st.open(t, dynamolock.WithClock(skewed(time.Minute))))
	t.Cleanup(func() { _ = behind.Close(); _ = ahead.Close() })
	key := uniqueKey(t)
	// Long enough that a renewal through the DynamoDB server on a loaded
	// machine comes in time: at 300ms a clean make test once lost it.
	const lease = 600 * time.Millisecond

	for _, c := range [][2]*distlock.Client{{behind, ahead}, {ahead, behind}} {
		l, err := c[0].TryLock(ctx, key, distlock.WithLease(lease), distlock.WithWatchdog(true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c[1].Lock(ctx, key, distlock.WithWait(4*lease)); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("a wait of 4 leases for a renewed lock: %v, want ErrNotAcquired", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("the holder lost its renewed lock while the other waited: %v", err)
		}
	}

	var (
		inside, turns atomic.Int32
		overlap       atomic.Bool
		wg            sync.WaitGroup
		errs          = make(chan error, 4)
	)
	deadline := time.Now().Add(5 * time.Second)
	for g, c := range []*distlock.Client{behind, ahead, behind, ahead} {
		wg.Go(func() {
			for i := 0; i < 25 && time.Now().Before(deadline); i++ {
				l, err := c.Lock(ctx, key, distlock.WithLease(lease), distlock.WithWatchdog(true), distlock.WithWait(10*time.Second))
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					overlap.Store(true)
				}
				time.Sleep(time.Duration(g+1) * time.Millisecond) // work while holding
				inside.Add(-1)
				turns.Add(1)
				if err := l.Release(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if overlap.Load() {
		t.Fatal("clients with skewed clocks held the key at once")
	}
	t.Logf("%d turns", turns.Load())
}

// TestSkewedClocksTakeover: the client a minute ahead takes over a lock
// abandoned by the client a minute behind only after a full lease of its
// own, and after the abandoned holder's own validity ended.
func TestSkewedClocksTakeover(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	behind := distlock.New(st.open(t, dynamolock.WithClock(skewed(-time.Minute))))
	ahead := distlock.New(st.open(t, dynamolock.WithClock(skewed(time.Minute))))
	t.Cleanup(func() { _ = behind.Close(); _ = ahead.Close() })
	key := uniqueKey(t)
	const lease = 500 * time.Millisecond
	start := time.Now()
	old, err := behind.TryLock(ctx, key, distlock.WithLease(lease)) // no watchdog: abandoned
	if err != nil {
		t.Fatal(err)
	}
	l, err := ahead.Lock(ctx, key, distlock.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if took := time.Since(start); took < lease {
		t.Fatalf("taken over after %v, within the lease of %v", took, lease)
	}
	select {
	case <-old.Done():
	default:
		t.Fatal("taken over while the abandoned holder still counted its lock valid")
	}
	if l.Fence() <= old.Fence() {
		t.Fatalf("fence %d after a takeover of %d", l.Fence(), old.Fence())
	}
}

// TestFenceAfterItemDeleted: the item keeps the fence across releases and
// expiries; an item deleted (by Time to Live, or by hand) starts again at
// the granting client's clock in microseconds, above the fences the key had.
func TestFenceAfterItemDeleted(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	b := st.open(t)
	key := uniqueKey(t)
	var last uint64
	for i := range 3 {
		req := driver.AcquireRequest{Key: key, Token: token(), TTL: time.Minute}
		g, err := b.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 && g.Fence != last+1 {
			t.Fatalf("grant %d: fence %d, want %d", i, g.Fence, last+1)
		}
		last = g.Fence
		if err := b.Release(ctx, key, req.Token); err != nil {
			t.Fatal(err)
		}
	}
	if info, err := b.Inspect(ctx, key); err != nil || info.Held || info.Fence != last {
		t.Fatalf("a released key: %+v, %v; want free with its last fence %d", info, err, last)
	}
	st.deleteItem(t, key)
	before := uint64(time.Now().UnixMicro())
	g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: token(), TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if g.Fence <= last || g.Fence <= before {
		t.Fatalf("fence after the item was deleted: %d; want above %d and the clock's %d µs", g.Fence, last, before)
	}
}

// TestThrottlingRetried: throttled requests are retried with the SDK's
// backoff and counted, in Throttled and telemetry's
// distlock_store_throttled_total; past the SDK's attempts the store error reaches the
// caller, neither ErrNotAcquired nor ErrNotHeld.
func TestThrottlingRetried(t *testing.T) {
	st := newStore(t)
	ctx := testContext(t, time.Minute)
	var throttle atomic.Int32 // UpdateItem attempts left to refuse
	c := st.client(t, func(o *dynamodb.Options) {
		o.RetryMaxAttempts = 3
		o.APIOptions = append(o.APIOptions, throttleUpdates(&throttle))
	})
	b := st.over(t, c, dynamolock.WithRequestTimeout(20*time.Second))
	req := driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: time.Minute}
	throttle.Store(2)
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatalf("an acquisition throttled twice: %v; want it retried and granted", err)
	}
	if n := b.Throttled(); n != 2 {
		t.Fatalf("Throttled() = %d after two throttled attempts, want 2", n)
	}
	throttle.Store(3)
	err := b.Release(ctx, req.Key, req.Token)
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ThrottlingException" || errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("a release throttled on every attempt: %v; want the throttling error", err)
	}
	if n := b.Throttled(); n != 5 {
		t.Fatalf("Throttled() = %d, want 5", n)
	}
	counter, err := telemetry.NewThrottleCounter(b)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(counter); n != 5 {
		t.Fatalf("distlock_store_throttled_total = %v, want 5", n)
	}
	if err := b.Release(ctx, req.Key, req.Token); err != nil {
		t.Fatalf("release once the throttling stopped: %v", err)
	}
}

// throttleUpdates refuses UpdateItem attempts with a ThrottlingException
// while *left is positive, before they reach the server, after the SDK's
// retry middleware.
func throttleUpdates(left *atomic.Int32) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Finalize.Insert(middleware.FinalizeMiddlewareFunc("TestThrottle",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				if middleware.GetOperationName(ctx) == "UpdateItem" && left.Add(-1) >= 0 {
					return middleware.FinalizeOutput{}, middleware.Metadata{}, &smithy.GenericAPIError{Code: "ThrottlingException", Message: "injected"}
				}
				return next.HandleFinalize(ctx, in)
			}), "Retry", middleware.After)
	}
}
