package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/telemetry"
)

// TestFailureEvents sends the events of failures that a healthy store does
// not produce on demand (a store error on acquire, a failed renewal, a
// release after the lease expired, a refusal as invalid) through every
// observer, as the client would.
func TestFailureEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := telemetry.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &records{}
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	obs := observe.Join(metrics, telemetry.NewLogger(slog.New(logs)), telemetry.NewTracer(tp))

	down := errors.New("connection refused")
	base := observe.Event{Key: "k", Group: "jobs", Backend: "redis", TokenID: "0a1b2c3d", Fence: 9}
	with := func(kind observe.Kind, f func(*observe.Event)) observe.Event {
		e := base
		e.Kind = kind
		f(&e)
		return e
	}
	ctx := context.Background()
	// A store error ends one acquisition; the next is refused as invalid.
	for _, end := range []observe.Event{
		with(observe.AcquireFailed, func(e *observe.Event) { e.Err = fmt.Errorf("distlock: lock %q: %w", e.Key, down) }),
		with(observe.NotAcquired, func(e *observe.Event) { e.Err = fmt.Errorf("lease: %w", distlock.ErrInvalidOption) }),
	} {
		actx := obs.AcquireStarted(ctx, with(observe.AcquireStart, func(*observe.Event) {}))
		obs.Observe(actx, with(observe.StoreCall, func(e *observe.Event) { e.Op, e.Latency, e.Err = "acquire", time.Millisecond, down }))
		obs.Observe(actx, end)
	}
	// A held lock whose renewal fails once, then released after its lease expired.
	actx := obs.AcquireStarted(ctx, with(observe.AcquireStart, func(*observe.Event) {}))
	obs.Observe(actx, with(observe.Acquired, func(*observe.Event) {}))
	obs.Observe(actx, with(observe.RenewFailed, func(e *observe.Event) { e.Err = down }))
	obs.Observe(actx, with(observe.Released, func(e *observe.Event) {
		e.Reason, e.Hold, e.Err = observe.ReleaseExpired, time.Minute, fmt.Errorf("lease had expired: %w", distlock.ErrNotHeld)
	}))
	// An operator frees a stuck key.
	obs.Observe(ctx, with(observe.ForceReleased, func(e *observe.Event) { e.Reason = "job stuck since 02:00" }))
	// A holder is asked to give its lock up.
	obs.Observe(ctx, with(observe.ReleaseRequested, func(e *observe.Event) { e.Reason = "deploy at 02:00" }))

	expected := `
# HELP distlock_acquisitions_total Lock acquisitions by result.
# TYPE distlock_acquisitions_total counter
distlock_acquisitions_total{backend="redis",group="jobs",result="acquired"} 1
distlock_acquisitions_total{backend="redis",group="jobs",result="error"} 2
# HELP distlock_renewals_total Lease renewals by result (renewed, failed).
# TYPE distlock_renewals_total counter
distlock_renewals_total{backend="redis",group="jobs",result="failed"} 1
# HELP distlock_releases_total Lock releases by reason (released, expired, lost).
# TYPE distlock_releases_total counter
distlock_releases_total{backend="redis",group="jobs",reason="expired"} 1
# HELP distlock_force_releases_total Keys an operator freed whoever held them.
# TYPE distlock_force_releases_total counter
distlock_force_releases_total{backend="redis",group="jobs"} 1
# HELP distlock_store_errors_total Backend requests that failed, by operation.
# TYPE distlock_store_errors_total counter
distlock_store_errors_total{backend="redis",op="acquire"} 2
# HELP distlock_locks_held Locks currently held by this process.
# TYPE distlock_locks_held gauge
distlock_locks_held{backend="redis",group="jobs"} 0
# HELP distlock_waiters Acquisitions in progress.
# TYPE distlock_waiters gauge
distlock_waiters{backend="redis",group="jobs"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "distlock_acquisitions_total", "distlock_renewals_total",
		"distlock_releases_total", "distlock_force_releases_total", "distlock_store_errors_total", "distlock_locks_held", "distlock_waiters"); err != nil {
		t.Error(err)
	}

	for _, c := range []struct {
		msg   string
		level string
	}{
		{"lock acquire failed", "ERROR"},
		{"lock refused", "ERROR"},
		{"lock renewal failed", "WARN"},
		{"lock released after its lease expired", "WARN"},
		{"lock force-released", "WARN"},
		{"lock release requested", "INFO"},
	} {
		if got := logs.find(c.msg, map[string]string{"level": c.level, "key": "k", "token_id": "0a1b2c3d"}); len(got) != 1 {
			t.Errorf("want one %s record %q, got %d:\n%s", c.level, c.msg, len(got), strings.Join(logs.all(), "\n"))
		}
	}
	if got := logs.find("lock acquired", nil); len(got) != 1 || got[0]["level"].String() != "DEBUG" {
		t.Errorf("'lock acquired' should be logged once at Debug by default: %v", got)
	}

	status := map[string]codes.Code{}
	for _, s := range spans.Ended() {
		status[s.Name()] = s.Status().Code
	}
	for name, want := range map[string]codes.Code{"distlock.renew": codes.Error, "distlock.release": codes.Error} {
		if got, ok := status[name]; !ok || got != want {
			t.Errorf("span %s: status %v (present %v), want %v; spans: %v", name, got, ok, want, status)
		}
	}
}

func TestDegradationHooks(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics, err := telemetry.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	logs := &records{}
	logger := telemetry.NewLogger(slog.New(logs))
	for _, active := range []bool{true, false} {
		metrics.Degradation("bulk", active, 300*time.Millisecond)
		logger.Degradation("bulk", active, 300*time.Millisecond)
		want := 0
		if active {
			want = 1
		}
		expected := fmt.Sprintf(`
# HELP distlock_degraded 1 while a policy fails the group's non-critical requests fast.
# TYPE distlock_degraded gauge
distlock_degraded{group="bulk"} %d
`, want)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "distlock_degraded"); err != nil {
			t.Error(err)
		}
	}
	if len(logs.find("lock group degraded: non-critical locks fail fast", map[string]string{"level": "WARN", "group": "bulk", "store_p99": "300ms"})) != 1 ||
		len(logs.find("lock group recovered", map[string]string{"level": "INFO", "group": "bulk"})) != 1 {
		t.Errorf("degradation records: %v", logs.all())
	}
}
