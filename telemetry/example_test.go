package telemetry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/telemetry"
)

func Example() {
	reg := prometheus.NewRegistry()
	metrics, err := telemetry.NewMetrics(reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Log to stdout without the time and the random token hash, so that the output is stable.
	handler := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey || a.Key == "token_id" || a.Key == "wait" || a.Key == "hold" {
			return slog.Attr{}
		}
		return a
	}})
	logs := telemetry.NewLogger(slog.New(handler), telemetry.WithSuccessLevel(slog.LevelInfo))
	client := distlock.New(memlock.New(), distlock.WithObserver(observe.Join(metrics, logs)))
	defer client.Close()
	ctx := context.Background()

	l, err := client.TryLock(ctx, "invoice/7", distlock.WithBusinessID("invoice-7"))
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = l.Release(ctx)

	n, _ := testutil.GatherAndCount(reg, "distlock_acquisitions_total")
	fmt.Println("acquisition series:", n)
	// Output:
	// level=INFO msg="lock acquired" key=invoice/7 group=default backend=mem business_id=invoice-7 fence=1 result=acquired
	// level=INFO msg="lock released" key=invoice/7 group=default backend=mem business_id=invoice-7 fence=1 reason=released
	// acquisition series: 1
}
