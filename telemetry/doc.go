// Package telemetry turns distlock's lock events into Prometheus metrics,
// log/slog records and OpenTelemetry spans. Each is an observe.Observer, so
// every backend gets them through the core client and none writes its own:
//
//	metrics, err := telemetry.NewMetrics(registry)
//	...
//	client := distlock.New(backend, distlock.WithObserver(observe.Join(
//		metrics,
//		telemetry.NewLogger(slog.Default()),
//		telemetry.NewTracer(tracerProvider),
//	)))
//
// A client without an observer pays nothing for telemetry.
//
// Metric labels are bounded: group (a policy group, "default" when none),
// backend, and a fixed result, reason or operation. Keys, tokens and owners
// never become labels; logs carry them, with the token only as a short hash.
package telemetry

import "github.com/distlock/distlock/observe"

// DefaultGroup labels events of locks outside any policy group.
const DefaultGroup = "default"

func groupOf(e observe.Event) string {
	if e.Group == "" {
		return DefaultGroup
	}
	return e.Group
}
