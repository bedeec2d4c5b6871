package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Throttler is a backend that counts the requests its store refused for
// throttling and retried (dynamolock.Backend).
type Throttler interface {
	Name() string
	Throttled() uint64
}

// NewThrottleCounter returns a collector of
//
//	distlock_store_throttled_total{backend}  counter: store requests refused for throttling (then retried)
//
// read from b at each scrape; register it next to NewMetrics' metrics. A
// rising rate means acquisitions and renewals are slowed by the store's
// capacity: renewals that stay throttled past a lease lose locks.
func NewThrottleCounter(b Throttler) (prometheus.Collector, error) {
	if b == nil {
		return nil, errors.New("telemetry: NewThrottleCounter needs a backend")
	}
	return prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace:   "distlock",
		Name:        "store_throttled_total",
		Help:        "Store requests refused for throttling, then retried.",
		ConstLabels: prometheus.Labels{"backend": b.Name()},
	}, func() float64 { return float64(b.Throttled()) }), nil
}
