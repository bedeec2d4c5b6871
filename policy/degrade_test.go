package policy_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/policy"
	"github.com/distlock/distlock/telemetry"
)

// slowStore is a store whose requests can be made slower than the
// degradation threshold and fast again.
type slowStore struct {
	newBackend func(t *testing.T) driver.Backend
	slow       func(p *policy.Policy)
	restore    func()
}

type change struct {
	group  string
	active bool
	p99    time.Duration
	gauge  float64 // distlock_degraded{group} right after the change, before later ones
	err    error
}

const (
	enterP99    = 80 * time.Millisecond // generous: a loaded machine must not look degraded
	minRecovery = 300 * time.Millisecond
)

// runDegradation slows the store and checks that the non-critical group
// fails fast (counted, reported, without a store request) while the critical
// group still locks, then restores the store and checks the recovery.
func runDegradation(t *testing.T, s slowStore) {
	reg := prometheus.NewRegistry()
	metrics, err := telemetry.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan change, 16)
	p, err := policy.New(policy.Config{
		Groups: []policy.Group{
			{Name: "bulk", Prefixes: []string{"bulk/"}, Degrade: policy.Degrade{EnterP99: enterP99, LeaveP99: enterP99 / 2, MinRecovery: minRecovery}},
			{Name: "pay", Prefixes: []string{"pay/"}, Critical: true},
		},
		Window: policy.Window{Length: time.Second, MinSamples: 5},
	}, policy.OnDegradation(metrics.Degradation), policy.OnDegradation(func(g string, active bool, p99 time.Duration) {
		// Hooks run in order under the policy's lock: the gauge is read before any later change.
		gauge, err := metricSum(reg, "distlock_degraded", map[string]string{"group": g})
		select {
		case changes <- change{g, active, p99, gauge, err}:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	client := distlock.New(s.newBackend(t), distlock.WithPolicy(p), distlock.WithObserver(observe.Join(p, metrics)))
	defer client.Close()
	ctx := context.Background()
	bulkKey, payKey := uniqueKey(t, "bulk/"), uniqueKey(t, "pay/")
	lockOnce := func(key string) error {
		l, err := client.TryLock(ctx, key)
		if err == nil {
			err = l.Release(ctx)
		}
		return err
	}
	if err := lockOnce(bulkKey); err != nil {
		t.Fatalf("healthy store: %v", err)
	}

	s.slow(p)
	for deadline := time.Now().Add(15 * time.Second); !p.Degraded("bulk"); {
		if time.Now().After(deadline) {
			t.Fatal("the bulk group did not degrade within 15s of a slow store")
		}
		if err := lockOnce(payKey); err != nil {
			t.Fatalf("critical lock on a slow store: %v", err)
		}
		time.Sleep(10 * time.Millisecond) // paced, so that a fast store's own requests do not drown the slow ones
	}
	if c := <-changes; c.group != "bulk" || !c.active || c.p99 < enterP99 || c.gauge != 1 || c.err != nil {
		t.Fatalf("first change %+v, want bulk active with p99 >= %v and the gauge at 1", c, enterP99)
	}

	// Non-critical: refused at once, before any store request.
	storeCalls := func() float64 { return sumMetric(t, reg, "distlock_store_request_seconds", nil) }
	calls := storeCalls()
	if _, err := client.Lock(ctx, bulkKey, distlock.WithWait(5*time.Second)); !errors.Is(err, distlock.ErrDegraded) {
		t.Fatalf("non-critical Lock while degraded: err = %v, want ErrDegraded", err)
	}
	if after := storeCalls(); after != calls {
		t.Fatalf("a degraded refusal made %v store requests", after-calls)
	}
	// Critical: still waits and locks.
	if err := lockOnce(payKey); err != nil {
		t.Fatalf("critical lock while degraded: %v", err)
	}

	s.restore()
	for deadline := time.Now().Add(15 * time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatal("the bulk group did not recover within 15s of a fast store")
		}
		err := lockOnce(bulkKey)
		if err == nil {
			break
		}
		if !errors.Is(err, distlock.ErrDegraded) {
			t.Fatalf("bulk lock while recovering: %v", err)
		}
		if err := lockOnce(payKey); err != nil {
			t.Fatalf("critical lock while recovering: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A loaded machine may slow the store again after this; changes alternate, so the second is the recovery.
	if c := <-changes; c.group != "bulk" || c.active || c.p99 >= enterP99/2 || c.gauge != 0 || c.err != nil {
		t.Fatalf("second change %+v, want bulk inactive with p99 < %v and the gauge at 0", c, enterP99/2)
	}
	if v := sumMetric(t, reg, "distlock_acquisitions_total", map[string]string{"group": "bulk", "result": "degraded"}); v < 1 {
		t.Fatalf("degraded acquisitions of bulk = %v, want at least 1", v)
	}
}

func TestDegradationMemlock(t *testing.T) {
	mem := memlock.New()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	runDegradation(t, slowStore{
		newBackend: func(*testing.T) driver.Backend { return mem },
		// memlock answers in microseconds: slow requests are reported to the policy as its observer would see them.
		slow: func(p *policy.Policy) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(2 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
						p.Observe(context.Background(), observe.Event{Kind: observe.StoreCall, Backend: "mem", Op: "acquire", Latency: 3 * enterP99})
					}
				}
			}()
		},
		restore: func() {
			close(stop)
			wg.Wait()
		},
	})
}

// sumMetric sums the series of name whose labels include labels: counter
// and gauge values, histogram sample counts.
func sumMetric(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, err := metricSum(g, name, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func metricSum(g prometheus.Gatherer, name string, labels map[string]string) (float64, error) {
	families, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather: %w", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum, nil
}
