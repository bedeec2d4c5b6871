package telemetry_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/telemetry"
)

// store connects the scripted sequence to a backend under test.
type store struct {
	// newBackend returns a new backend on the store; every one reaches the same store.
	newBackend func(t *testing.T) driver.Backend
	// steal removes l, held through c, from the store behind its holder's
	// back, so that its next renewal is refused.
	steal func(t *testing.T, c *distlock.Client, l *distlock.Lock)
}

// groupPolicy puts every key in the group "orders" and refuses keys under
// "slow/" as a degraded policy would.
type groupPolicy struct{}

func (groupPolicy) Apply(_ context.Context, r *distlock.Request) error {
	r.Group = "orders"
	if strings.HasPrefix(r.Key, "slow/") {
		return fmt.Errorf("group orders: %w", distlock.ErrDegraded)
	}
	return nil
}

func uniqueKey(t *testing.T, prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ReplaceAll(t.Name(), "/", "-") + "-" + hex.EncodeToString(b[:])
}

// waitLost waits, bounded, for l to be reported lost.
func waitLost(t *testing.T, l *distlock.Lock) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("lock %q not reported lost within 10s", l.Key())
	}
	if !errors.Is(l.Err(), distlock.ErrLockLost) {
		t.Fatalf("lock %q: Err() = %v, want ErrLockLost", l.Key(), l.Err())
	}
}

// runScript drives one sequence of lock events through a client with every
// observer and checks the metrics, log records and spans they produce:
// acquire, contended try, renew, release, loss behind the holder's back,
// max hold, and a degraded refusal.
func runScript(t *testing.T, s store) {
	reg := prometheus.NewRegistry()
	metrics, err := telemetry.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &records{}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	obs := distlock.WithObserver(observe.Join(metrics,
		telemetry.NewLogger(slog.New(logs), telemetry.WithSuccessLevel(slog.LevelInfo)), telemetry.NewTracer(tp)))

	alice := distlock.New(s.newBackend(t), obs, distlock.WithPolicy(groupPolicy{}))
	defer alice.Close()
	bob := distlock.New(s.newBackend(t), obs, distlock.WithPolicy(groupPolicy{}))
	defer bob.Close()
	backend := alice.Backend().(driver.Namer).Name()

	ctx, request := tp.Tracer("test").Start(context.Background(), "request")
	key, lostKey, capKey := uniqueKey(t, "a/"), uniqueKey(t, "b/"), uniqueKey(t, "c/")

	// Acquire, contended try, renew, release.
	l, err := alice.Lock(ctx, key, distlock.WithWait(5*time.Second), distlock.WithOwner("alice"), distlock.WithBusinessID("order-7"))
	if err != nil {
		t.Fatalf("lock %q: %v", key, err)
	}
	if _, err := bob.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("contended TryLock: err = %v, want ErrNotAcquired", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}

	// Loss: the key is removed behind the holder's back; the next renewal is refused.
	lost, err := bob.Lock(ctx, lostKey, distlock.WithWait(5*time.Second), distlock.WithLease(3*time.Second),
		distlock.WithWatchdog(true), distlock.WithRenewInterval(50*time.Millisecond))
	if err != nil {
		t.Fatalf("lock %q: %v", lostKey, err)
	}
	s.steal(t, bob, lost)
	waitLost(t, lost)
	if err := lost.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("release of a lost lock: err = %v, want ErrLockLost", err)
	}

	// Max hold: the watchdog stops at the cap and reports the loss.
	capped, err := alice.Lock(ctx, capKey, distlock.WithWait(5*time.Second), distlock.WithMaxHold(150*time.Millisecond))
	if err != nil {
		t.Fatalf("lock %q: %v", capKey, err)
	}
	waitLost(t, capped)
	if err := capped.Release(ctx); !errors.Is(err, distlock.ErrLockLost) {
		t.Fatalf("release of a capped lock: err = %v, want ErrLockLost", err)
	}

	// A degraded refusal never reaches the store.
	if _, err := alice.TryLock(ctx, "slow/"+key); !errors.Is(err, distlock.ErrDegraded) {
		t.Fatalf("degraded TryLock: err = %v, want ErrDegraded", err)
	}
	request.End()

	checkMetrics(t, reg, backend)
	checkLogs(t, logs, key, l)
	checkSpans(t, spans, request, key, lostKey)
}

func checkMetrics(t *testing.T, reg *prometheus.Registry, backend string) {
	t.Helper()
	expected := strings.ReplaceAll(`
# HELP distlock_acquisitions_total Lock acquisitions by result.
# TYPE distlock_acquisitions_total counter
distlock_acquisitions_total{backend="B",group="orders",result="acquired"} 3
distlock_acquisitions_total{backend="B",group="orders",result="degraded"} 1
distlock_acquisitions_total{backend="B",group="orders",result="not_acquired"} 1
# HELP distlock_lost_total Locks lost before release, by reason.
# TYPE distlock_lost_total counter
distlock_lost_total{backend="B",group="orders",reason="max_hold"} 1
distlock_lost_total{backend="B",group="orders",reason="deleted"} 1
# HELP distlock_releases_total Lock releases by reason (released, expired, lost).
# TYPE distlock_releases_total counter
distlock_releases_total{backend="B",group="orders",reason="lost"} 2
distlock_releases_total{backend="B",group="orders",reason="released"} 1
# HELP distlock_locks_held Locks currently held by this process.
# TYPE distlock_locks_held gauge
distlock_locks_held{backend="B",group="orders"} 0
# HELP distlock_waiters Acquisitions in progress.
# TYPE distlock_waiters gauge
distlock_waiters{backend="B",group="orders"} 0
`, `"B"`, `"`+backend+`"`)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"distlock_acquisitions_total", "distlock_lost_total", "distlock_releases_total", "distlock_locks_held", "distlock_waiters"); err != nil {
		t.Error(err)
	}
	atLeast := []struct {
		name   string
		labels map[string]string
		min    float64
	}{
		{"distlock_acquire_wait_seconds", map[string]string{"group": "orders", "backend": backend, "result": "acquired"}, 3},
		{"distlock_acquire_wait_seconds", map[string]string{"group": "orders", "backend": backend, "result": "not_acquired"}, 1},
		{"distlock_hold_seconds", map[string]string{"group": "orders", "backend": backend}, 3},
		{"distlock_renewals_total", map[string]string{"group": "orders", "backend": backend, "result": "renewed"}, 1},
		// Lock on a backend that waits natively makes no single acquire request: only TryLock counts surely.
		{"distlock_store_request_seconds", map[string]string{"backend": backend, "op": "acquire"}, 1},
		{"distlock_store_request_seconds", map[string]string{"backend": backend, "op": "renew"}, 2},
		{"distlock_store_request_seconds", map[string]string{"backend": backend, "op": "release"}, 1},
	}
	for _, c := range atLeast {
		if v, ok := metric(t, reg, c.name, c.labels); !ok || v < c.min {
			t.Errorf("%s%v = %v (present %v), want at least %v", c.name, c.labels, v, ok, c.min)
		}
	}
	if v, ok := metric(t, reg, "distlock_hold_seconds", map[string]string{"group": "orders", "backend": backend}); ok && v != 3 {
		t.Errorf("distlock_hold_seconds count = %v, want exactly 3 (one per hold)", v)
	}
}

func checkLogs(t *testing.T, logs *records, key string, l *distlock.Lock) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("records:\n%s", strings.Join(logs.all(), "\n"))
		}
	}()
	acquired := logs.find("lock acquired", map[string]string{"key": key, "group": "orders", "owner": "alice", "business_id": "order-7", "level": "INFO"})
	if len(acquired) != 1 {
		t.Fatalf("want one 'lock acquired' record for %q, got %d", key, len(acquired))
	}
	tokenID := acquired[0]["token_id"].String()
	if len(tokenID) != 8 {
		t.Errorf("token_id = %q, want an 8-character hash", tokenID)
	}
	if acquired[0]["fence"].Uint64() != l.Fence() {
		t.Errorf("fence = %v, want %d", acquired[0]["fence"], l.Fence())
	}
	for _, s := range logs.all() {
		if strings.Contains(s, l.Token()) {
			t.Errorf("a record carries the whole token: %s", s)
		}
	}
	checks := []struct {
		msg  string
		want map[string]string
	}{
		{"lock not acquired", map[string]string{"key": key, "result": "not_acquired", "level": "INFO"}},
		{"lock released", map[string]string{"key": key, "reason": "released", "token_id": tokenID, "level": "INFO"}},
		{"lock lost", map[string]string{"reason": "deleted", "level": "WARN"}},
		{"lock lost", map[string]string{"reason": "max_hold", "level": "WARN"}},
		{"lock not acquired", map[string]string{"key": "slow/" + key, "result": "degraded", "level": "INFO"}},
	}
	for _, c := range checks {
		if got := logs.find(c.msg, c.want); len(got) != 1 {
			t.Errorf("want one %q record with %v, got %d", c.msg, c.want, len(got))
		}
	}
	if rel := logs.find("lock released", map[string]string{"key": key}); len(rel) == 1 && rel[0]["hold"].Duration() <= 0 {
		t.Errorf("release record hold = %v, want > 0", rel[0]["hold"])
	}
}

func checkSpans(t *testing.T, rec *tracetest.SpanRecorder, request trace.Span, key, lostKey string) {
	t.Helper()
	ended := rec.Ended()
	attr := func(s sdktrace.ReadOnlySpan, k string) attribute.Value {
		for _, a := range s.Attributes() {
			if string(a.Key) == k {
				return a.Value
			}
		}
		return attribute.Value{}
	}
	var acquires, releases, losses []sdktrace.ReadOnlySpan
	for _, s := range ended {
		switch s.Name() {
		case "distlock.acquire":
			acquires = append(acquires, s)
		case "distlock.release":
			releases = append(releases, s)
		case "distlock.lost":
			losses = append(losses, s)
		}
	}
	if len(acquires) != 5 || len(releases) != 3 || len(losses) != 2 {
		t.Fatalf("spans: %d acquire, %d release, %d lost; want 5, 3, 2", len(acquires), len(releases), len(losses))
	}
	reqSC := request.SpanContext()
	var granted sdktrace.ReadOnlySpan
	var degraded bool
	for _, s := range acquires {
		if s.Parent().SpanID() != reqSC.SpanID() {
			t.Errorf("acquire span %s is not a child of the request span", s.SpanContext().SpanID())
		}
		switch attr(s, "distlock.result").AsString() {
		case "acquired":
			if attr(s, "distlock.key").AsString() == key {
				granted = s
			}
			if attr(s, "distlock.fence").AsInt64() == 0 || s.Status().Code == codes.Error {
				t.Errorf("granted acquire span: fence %v, status %v", attr(s, "distlock.fence"), s.Status())
			}
		case "not_acquired", "degraded":
			if s.Status().Code != codes.Error {
				t.Errorf("%v acquire span status = %v, want Error", attr(s, "distlock.result"), s.Status())
			}
			degraded = degraded || attr(s, "distlock.result").AsString() == "degraded"
		}
		if attr(s, "distlock.group").AsString() != "orders" || attr(s, "distlock.wait_seconds").Type() != attribute.FLOAT64 {
			t.Errorf("acquire span attributes: %v", s.Attributes())
		}
	}
	if granted == nil || !degraded {
		t.Fatalf("no granted acquire span for %q (%v) or no degraded one (%v)", key, granted != nil, degraded)
	}
	var sawRelease bool
	for _, s := range releases {
		links := s.Links()
		if len(links) != 1 || s.Parent().SpanID() != reqSC.SpanID() {
			t.Errorf("release span: %d links, parent %s; want one link and the request span as parent", len(links), s.Parent().SpanID())
			continue
		}
		if links[0].SpanContext.SpanID() == granted.SpanContext().SpanID() {
			sawRelease = len(s.Events()) == 1 && s.Events()[0].Name == "distlock.released"
		}
	}
	if !sawRelease {
		t.Error("no release span with a 'distlock.released' event linked to the granted acquire span")
	}
	var sawLoss bool
	for _, s := range losses {
		if s.Status().Code != codes.Error || len(s.Events()) != 1 {
			t.Errorf("lost span: status %v, %d events", s.Status(), len(s.Events()))
			continue
		}
		for _, a := range s.Events()[0].Attributes {
			sawLoss = sawLoss || (a.Key == "distlock.key" && a.Value.AsString() == lostKey)
		}
	}
	if !sawLoss {
		t.Errorf("no lost span for %q", lostKey)
	}
}
