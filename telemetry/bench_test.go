package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/telemetry"
)

// BenchmarkTryLockRelease measures client.TryLock followed by Release on
// memlock without an observer and with each observer, against the raw
// store floor (memlock's own Acquire and Release).
func BenchmarkTryLockRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("floor", func(b *testing.B) {
		mem := memlock.New()
		req := driver.AcquireRequest{Key: "bench", Token: "0123456789abcdef0123456789abcdef", TTL: distlock.DefaultLease}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := mem.Acquire(ctx, req); err != nil {
				b.Fatal(err)
			}
			if err := mem.Release(ctx, req.Key, req.Token); err != nil {
				b.Fatal(err)
			}
		}
	})
	metrics, err := telemetry.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider() // samples every span, exports none
	defer func() { _ = tp.Shutdown(ctx) }()
	jsonLogs := telemetry.NewLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)), telemetry.WithSuccessLevel(slog.LevelInfo))
	cases := []struct {
		name string
		opts []distlock.ClientOption
	}{
		{"none", nil},
		{"metrics", []distlock.ClientOption{distlock.WithObserver(metrics)}},
		{"logs-disabled", []distlock.ClientOption{distlock.WithObserver(telemetry.NewLogger(slog.New(slog.DiscardHandler)))}},
		{"logs-json", []distlock.ClientOption{distlock.WithObserver(jsonLogs)}},
		{"traces", []distlock.ClientOption{distlock.WithObserver(telemetry.NewTracer(tp))}},
		{"all", []distlock.ClientOption{distlock.WithObserver(observe.Join(metrics, jsonLogs, telemetry.NewTracer(tp)))}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			client := distlock.New(memlock.New(), c.opts...)
			defer client.Close()
			b.ReportAllocs()
			for b.Loop() {
				l, err := client.TryLock(ctx, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
