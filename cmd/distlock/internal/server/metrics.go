package server

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's request metrics (all prefixed distlock_server_):
//
//	requests_total{method,code}  counter: calls by method and result code ("ok" or a Connect code)
//	request_seconds{method}      histogram: call duration (a Watch's, to its end)
//	waiting                      gauge: Acquire calls that asked to wait and have not returned
//
// Methods are the LockService's RPC names, a fixed set; keys and tenants
// never become labels. A nil *metrics records nothing.
type metrics struct {
	requests *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	waiting  prometheus.Gauge
}

// newMetrics registers the metrics on reg, or returns nil if reg is nil.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "distlock", Subsystem: "server", Name: "requests_total",
			Help: "LockService calls by method and result code.",
		}, []string{"method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "distlock", Subsystem: "server", Name: "request_seconds",
			Help:    "LockService call duration by method.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}, []string{"method"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "distlock", Subsystem: "server", Name: "waiting",
			Help: "Acquire calls that asked to wait and have not returned.",
		}),
	}
	collectors := []prometheus.Collector{m.requests, m.seconds, m.waiting}
	for i, c := range collectors {
		if err := reg.Register(c); err != nil {
			for _, done := range collectors[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("server: metrics: %w", err)
		}
	}
	return m, nil
}

// observe counts one finished call.
func (m *metrics) observe(method, code string, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(method, code).Inc()
	m.seconds.WithLabelValues(method).Observe(d.Seconds())
}

// wait adds delta to the waiting gauge.
func (m *metrics) wait(delta float64) {
	if m == nil {
		return
	}
	m.waiting.Add(delta)
}
