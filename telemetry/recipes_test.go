package telemetry_test

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/stampede"
	"github.com/distlock/distlock/telemetry"
)

// TestRecipeCollectors: an idempotency Keeper's and a stampede Cache's
// counts are exported as they stand at the scrape.
func TestRecipeCollectors(t *testing.T) {
	ctx := context.Background()
	client := distlock.New(memlock.New())
	defer client.Close()

	keeper, err := idem.New(client, idem.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	run := func(context.Context, uint64) ([]byte, error) { return []byte("charged"), nil }
	for range 2 {
		if _, err := keeper.Do(ctx, "payment-7", []byte("7 EUR"), run); err != nil {
			t.Fatal(err)
		}
	}
	ic, err := telemetry.NewIdemCollector("payments", keeper)
	if err != nil {
		t.Fatal(err)
	}
	want := `
# HELP distlock_idem_total Idempotency-key calls, by what happened.
# TYPE distlock_idem_total counter
distlock_idem_total{event="conflict",name="payments"} 0
distlock_idem_total{event="execution",name="payments"} 1
distlock_idem_total{event="failure",name="payments"} 0
distlock_idem_total{event="replay",name="payments"} 1
distlock_idem_total{event="superseded",name="payments"} 0
distlock_idem_total{event="wait",name="payments"} 0
`
	if err := testutil.CollectAndCompare(ic, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}

	cache, err := stampede.New(client, stampede.NewMemoryStore())
	if err != nil {
		t.Fatal(err)
	}
	defer cache.Close()
	load := func(context.Context) ([]byte, error) { return []byte("report"), nil }
	for range 2 {
		if _, err := cache.Get(ctx, "report", load); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := telemetry.NewStampedeCollector("reports", cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.CollectAndCompare(sc, strings.NewReader(`
# HELP distlock_stampede_total Cache calls and rebuilds, by what happened.
# TYPE distlock_stampede_total counter
distlock_stampede_total{event="hit",name="reports"} 1
distlock_stampede_total{event="joined",name="reports"} 0
distlock_stampede_total{event="load",name="reports"} 1
distlock_stampede_total{event="load_failure",name="reports"} 0
distlock_stampede_total{event="miss",name="reports"} 1
distlock_stampede_total{event="refused",name="reports"} 0
distlock_stampede_total{event="stale_served",name="reports"} 0
distlock_stampede_total{event="wait",name="reports"} 0
`)); err != nil {
		t.Fatal(err)
	}
	if _, err := telemetry.NewIdemCollector("x", nil); err == nil {
		t.Fatal("a nil Keeper was accepted")
	}
}
