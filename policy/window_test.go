package policy

import (
	"testing"
	"time"
)

func TestWindowQuantile(t *testing.T) {
	w := newWindow(time.Second) // ten 100ms slots
	t0 := time.Unix(1000, 0)
	if p, n := w.quantile(t0, 0.99); p != 0 || n != 0 {
		t.Fatalf("empty window: p99 %v over %d", p, n)
	}
	for i := range 99 {
		w.add(t0.Add(time.Duration(i)*time.Millisecond), time.Millisecond)
	}
	w.add(t0, time.Second)
	p, n := w.quantile(t0.Add(100*time.Millisecond), 0.99)
	if n != 100 || p < time.Millisecond || p > 1190*time.Microsecond {
		t.Fatalf("99 fast, 1 slow: p99 %v over %d, want about 1ms over 100", p, n)
	}
	w.add(t0.Add(200*time.Millisecond), time.Second)
	p, _ = w.quantile(t0.Add(200*time.Millisecond), 0.99)
	if p < time.Second || p > 1190*time.Millisecond {
		t.Fatalf("2 slow in 101: p99 %v, want about 1s", p)
	}
	// The first slot leaves the window one window length after it began.
	if p, n := w.quantile(t0.Add(1050*time.Millisecond), 0.99); n != 1 || p < time.Second {
		t.Fatalf("after the first slot left: p99 %v over %d, want the one slow request at 200ms", p, n)
	}
	if p, n := w.quantile(t0.Add(3*time.Second), 0.99); p != 0 || n != 0 {
		t.Fatalf("after the window: p99 %v over %d, want empty", p, n)
	}
}

func TestBuckets(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 150 * time.Microsecond, time.Millisecond, 37 * time.Millisecond, time.Second, 80 * time.Second} {
		b := bucket(d)
		if bound(b) < d || (b > 0 && bound(b-1) >= d) {
			t.Errorf("bucket(%v) = %d with bounds (%v, %v]", d, b, bound(b-1), bound(b))
		}
	}
	if b := bucket(time.Hour); b != buckets-1 {
		t.Errorf("bucket(1h) = %d, want the last", b)
	}
}

func TestHysteresis(t *testing.T) {
	g := &group{Group: Group{Degrade: Degrade{EnterP99: 100 * time.Millisecond, LeaveP99: 50 * time.Millisecond, MinRecovery: time.Second}}}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at     time.Duration
		p99    time.Duration
		enough bool
		want   bool // degraded after the step
	}{
		{0, 200 * time.Millisecond, false, false},                    // too few samples to begin
		{100 * time.Millisecond, 99 * time.Millisecond, true, false}, // under the enter threshold
		{200 * time.Millisecond, 100 * time.Millisecond, true, true}, // enters at the threshold
		{300 * time.Millisecond, 60 * time.Millisecond, true, true},  // between thresholds: stays
		{400 * time.Millisecond, 10 * time.Millisecond, false, true}, // under leave: recovery starts
		{1300 * time.Millisecond, 10 * time.Millisecond, true, true}, // not long enough yet
		{1350 * time.Millisecond, 70 * time.Millisecond, true, true}, // back over leave: recovery restarts
		{1400 * time.Millisecond, 0, false, true},                    // empty window counts as fast
		{2399 * time.Millisecond, 0, false, true},
		{2400 * time.Millisecond, 0, false, false}, // under leave for MinRecovery: leaves
		{2500 * time.Millisecond, 60 * time.Millisecond, true, false},
	}
	for i, s := range steps {
		changed := g.step(t0.Add(s.at), s.p99, s.enough)
		if got := g.degraded.Load(); got != s.want {
			t.Fatalf("step %d (at %v, p99 %v): degraded %v, want %v", i, s.at, s.p99, got, s.want)
		}
		if wasChange := i > 0 && steps[i-1].want != s.want; changed != wasChange {
			t.Fatalf("step %d: change reported %v, want %v", i, changed, wasChange)
		}
	}
}
