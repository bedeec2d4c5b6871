package telemetry

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/stampede"
)

// NewIdemCollector returns a collector of
//
//	distlock_idem_total{name,event}  counter: execution, replay, conflict, wait, failure, superseded
//
// read from k's Stats at each scrape; name tells Keepers apart.
func NewIdemCollector(name string, k *idem.Keeper) (prometheus.Collector, error) {
	if k == nil {
		return nil, errors.New("telemetry: NewIdemCollector needs a Keeper")
	}
	return countersOf("idem_total", "Idempotency-key calls, by what happened.", name, map[string]func() uint64{
		"execution":  func() uint64 { return k.Stats().Executions },
		"replay":     func() uint64 { return k.Stats().Replays },
		"conflict":   func() uint64 { return k.Stats().Conflicts },
		"wait":       func() uint64 { return k.Stats().Waits },
		"failure":    func() uint64 { return k.Stats().Failures },
		"superseded": func() uint64 { return k.Stats().Superseded },
	}), nil
}

// NewStampedeCollector returns a collector of
//
//	distlock_stampede_total{name,event}  counter: hit, stale_served, miss, joined, wait, load, load_failure, refused
//
// read from c's Stats at each scrape; name tells Caches apart.
func NewStampedeCollector(name string, c *stampede.Cache) (prometheus.Collector, error) {
	if c == nil {
		return nil, errors.New("telemetry: NewStampedeCollector needs a Cache")
	}
	return countersOf("stampede_total", "Cache calls and rebuilds, by what happened.", name, map[string]func() uint64{
		"hit":          func() uint64 { return c.Stats().Hits },
		"stale_served": func() uint64 { return c.Stats().StaleServed },
		"miss":         func() uint64 { return c.Stats().Misses },
		"joined":       func() uint64 { return c.Stats().Joined },
		"wait":         func() uint64 { return c.Stats().Waits },
		"load":         func() uint64 { return c.Stats().Loads },
		"load_failure": func() uint64 { return c.Stats().LoadFailures },
		"refused":      func() uint64 { return c.Stats().Refused },
	}), nil
}

// countersOf is one counter distlock_<metric>{name,event} per event, each
// read from its function at a scrape.
func countersOf(metric, help, name string, events map[string]func() uint64) prometheus.Collector {
	cs := make(collectors, 0, len(events))
	for event, read := range events {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "distlock", Name: metric, Help: help,
			ConstLabels: prometheus.Labels{"name": name, "event": event},
		}, func() float64 { return float64(read()) }))
	}
	return cs
}

// collectors is several collectors registered as one.
type collectors []prometheus.Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}
