package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/observe"
)

// Metrics is an observe.Observer that records Prometheus metrics. Create it
// with NewMetrics; it is safe for concurrent use.
//
// Metrics (all prefixed distlock_):
//
//	acquisitions_total{group,backend,result}   counter: acquired, not_acquired, error, degraded
//	acquire_wait_seconds{group,backend,result} histogram: time spent acquiring
//	hold_seconds{group,backend}                histogram: how long locks were held, at release or loss
//	renewals_total{group,backend,result}       counter: renewed, failed
//	lost_total{group,backend,reason}           counter: taken, deleted, renew_refused, unreachable, max_hold, store_deleted, expired
//	releases_total{group,backend,reason}       counter: released, expired, lost
//	force_releases_total{group,backend}        counter: keys an operator freed whoever held them
//	store_request_seconds{backend,op}          histogram: backend request latency (acquire, renew, release, inspect, list)
//	store_errors_total{backend,op}             counter: backend requests that failed (contention is not a failure)
//	locks_held{group,backend}                  gauge: locks held by this process (not grants for remote holders)
//	waiters{group,backend}                     gauge: acquisitions in progress
//	degraded{group}                            gauge: 1 while a policy fails the group's non-critical requests fast
//
// A backend whose store throttles (DynamoDB) has its throttled requests
// counted by NewThrottleCounter.
type Metrics struct {
	acquisitions *prometheus.CounterVec
	wait         *prometheus.HistogramVec
	hold         *prometheus.HistogramVec
	renewals     *prometheus.CounterVec
	lost         *prometheus.CounterVec
	releases     *prometheus.CounterVec
	forced       *prometheus.CounterVec
	storeLatency *prometheus.HistogramVec
	storeErrors  *prometheus.CounterVec
	held         *prometheus.GaugeVec
	waiters      *prometheus.GaugeVec
	degraded     *prometheus.GaugeVec
}

var _ observe.Observer = (*Metrics)(nil)

// NewMetrics creates the metrics and registers them on reg, which must not
// be nil (pass prometheus.DefaultRegisterer to use the global registry).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("telemetry: NewMetrics needs a prometheus.Registerer")
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "distlock", Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "distlock", Name: name, Help: help, Buckets: buckets}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "distlock", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		acquisitions: counter("acquisitions_total", "Lock acquisitions by result.", "group", "backend", "result"),
		wait: histogram("acquire_wait_seconds", "Time spent acquiring a lock, by result.",
			prometheus.ExponentialBuckets(0.001, 4, 9), "group", "backend", "result"),
		hold: histogram("hold_seconds", "How long locks were held, observed at release or loss.",
			[]float64{0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600}, "group", "backend"),
		renewals: counter("renewals_total", "Lease renewals by result (renewed, failed).", "group", "backend", "result"),
		lost:     counter("lost_total", "Locks lost before release, by reason.", "group", "backend", "reason"),
		releases: counter("releases_total", "Lock releases by reason (released, expired, lost).", "group", "backend", "reason"),
		forced:   counter("force_releases_total", "Keys an operator freed whoever held them.", "group", "backend"),
		storeLatency: histogram("store_request_seconds", "Latency of backend requests, by operation.",
			prometheus.ExponentialBuckets(0.0005, 2, 13), "backend", "op"),
		storeErrors: counter("store_errors_total", "Backend requests that failed, by operation.", "backend", "op"),
		held:        gauge("locks_held", "Locks currently held by this process.", "group", "backend"),
		waiters:     gauge("waiters", "Acquisitions in progress.", "group", "backend"),
		degraded:    gauge("degraded", "1 while a policy fails the group's non-critical requests fast.", "group"),
	}
	for _, c := range []prometheus.Collector{m.acquisitions, m.wait, m.hold, m.renewals, m.lost, m.releases, m.forced,
		m.storeLatency, m.storeErrors, m.held, m.waiters, m.degraded} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("telemetry: register metrics: %w", err)
		}
	}
	return m, nil
}

// AcquireStarted counts a waiter; the event that ends the acquisition
// uncounts it.
func (m *Metrics) AcquireStarted(ctx context.Context, e observe.Event) context.Context {
	m.waiters.WithLabelValues(groupOf(e), e.Backend).Inc()
	return ctx
}

// Observe records e.
func (m *Metrics) Observe(_ context.Context, e observe.Event) {
	group := groupOf(e)
	if result, ok := acquireResult(e); ok {
		m.acquisitions.WithLabelValues(group, e.Backend, result).Inc()
		m.waiters.WithLabelValues(group, e.Backend).Dec()
		m.wait.WithLabelValues(group, e.Backend, result).Observe(e.Wait.Seconds())
		if e.Kind == observe.Acquired && !e.Remote { // a remote holder's lock is not held here
			m.held.WithLabelValues(group, e.Backend).Inc()
		}
		return
	}
	switch e.Kind {
	case observe.Renewed:
		m.renewals.WithLabelValues(group, e.Backend, "renewed").Inc()
	case observe.RenewFailed:
		m.renewals.WithLabelValues(group, e.Backend, "failed").Inc()
	case observe.Lost:
		m.lost.WithLabelValues(group, e.Backend, e.Reason).Inc()
		m.ended(group, e)
	case observe.Released:
		m.releases.WithLabelValues(group, e.Backend, e.Reason).Inc()
		if e.Reason != observe.ReleaseLost && !e.Remote { // a lost lock ended at its loss
			m.ended(group, e)
		}
	case observe.ForceReleased:
		m.forced.WithLabelValues(group, e.Backend).Inc()
	case observe.StoreCall:
		m.storeLatency.WithLabelValues(e.Backend, e.Op).Observe(e.Latency.Seconds())
		if e.Err != nil && !errors.Is(e.Err, distlock.ErrNotAcquired) && !errors.Is(e.Err, distlock.ErrNotHeld) {
			m.storeErrors.WithLabelValues(e.Backend, e.Op).Inc()
		}
	}
}

// ended records the end of a hold.
func (m *Metrics) ended(group string, e observe.Event) {
	m.held.WithLabelValues(group, e.Backend).Dec()
	m.hold.WithLabelValues(group, e.Backend).Observe(e.Hold.Seconds())
}

// Degradation sets the degraded gauge of group. Pass it to
// policy.OnDegradation.
func (m *Metrics) Degradation(group string, active bool, _ time.Duration) {
	if group == "" {
		group = DefaultGroup
	}
	v := 0.0
	if active {
		v = 1
	}
	m.degraded.WithLabelValues(group).Set(v)
}
