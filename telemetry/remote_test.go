package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/telemetry"
)

// TestRemoteGrantsAreNotHeldHere counts grants made for holders elsewhere
// (AcquireToken, as the lock service makes them) as acquisitions, renewals
// and releases, but never as locks this process holds.
func TestRemoteGrantsAreNotHeldHere(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := telemetry.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := distlock.New(memlock.New(), distlock.WithObserver(m), distlock.WithBackendName("mem"))
	defer c.Close()
	ctx := context.Background()
	const token = "0123456789abcdef0123456789abcdef"
	if _, err := c.AcquireToken(ctx, "remote", token, distlock.WithLease(time.Minute)); err != nil {
		t.Fatal(err)
	}
	held := func() float64 { // the sum over every series, 0 if there is none
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		sum := 0.0
		for _, mf := range mfs {
			if mf.GetName() == "distlock_locks_held" {
				for _, s := range mf.GetMetric() {
					sum += s.GetGauge().GetValue()
				}
			}
		}
		return sum
	}
	if got := held(); got != 0 {
		t.Fatalf("locks_held after a remote grant = %v, want 0", got)
	}
	if err := c.RenewToken(ctx, "remote", token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := c.ReleaseToken(ctx, "remote", token); err != nil {
		t.Fatal(err)
	}
	if got := held(); got != 0 {
		t.Fatalf("locks_held after a remote release = %v, want 0", got)
	}
	want := map[string]float64{
		"distlock_acquisitions_total": 1,
		"distlock_renewals_total":     1,
		"distlock_releases_total":     1,
	}
	for name, n := range want {
		if got, err := testutil.GatherAndCount(reg, name); err != nil || float64(got) != n {
			t.Errorf("%s: %d series, %v; want %v", name, got, err, n)
		}
	}
}
