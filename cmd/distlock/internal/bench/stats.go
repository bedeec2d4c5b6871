package bench

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histograms record nanoseconds from 1 ns to an hour with two significant
// digits (at most 1% off): about 37 KB each, so that every worker can keep
// its own without a lock on the hot path.
const (
	histMin     = 1
	histMax     = int64(time.Hour)
	histSigFigs = 2
)

// Error kinds of failed attempts and of releases.
const (
	KindStore    = "store"    // the store failed or could not be reached
	KindCanceled = "canceled" // the run was interrupted during the attempt
	KindDegraded = "degraded" // a policy refused the attempt
	KindInvalid  = "invalid"  // the client or a policy refused the request's options
	KindLost     = "lost"     // a lock got was lost before its release (lease ran out, store dropped it)
	KindRelease  = "release"  // a release failed
)

// counters are a side's running totals, read by the progress reporter.
type counters struct {
	attempts, errors atomic.Int64
}

// recorder is one worker's record of one side (distlock or floor).
type recorder struct {
	acquire, wait, release *hdrhistogram.Histogram
	acquired, notAcquired  int64
	failed                 map[string]int64  // failed attempts by kind
	afterAcquire           map[string]int64  // lost locks and failed releases by kind
	firstErr               map[string]string // first error message of each kind
}

func newRecorder() *recorder {
	h := func() *hdrhistogram.Histogram { return hdrhistogram.New(histMin, histMax, histSigFigs) }
	return &recorder{acquire: h(), wait: h(), release: h(),
		failed: map[string]int64{}, afterAcquire: map[string]int64{}, firstErr: map[string]string{}}
}

// record adds a duration to h, clamped into the histogram's range (0 is
// recorded as such: a grant that did not wait).
func record(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(int64(d), 0), histMax)) // cannot fail once clamped
}

// note counts err under kind in m and keeps its message if it is the first.
func (r *recorder) note(m map[string]int64, kind string, err error) {
	m[kind]++
	if _, ok := r.firstErr[kind]; !ok {
		r.firstErr[kind] = err.Error()
	}
}

// merge adds o into r.
func (r *recorder) merge(o *recorder) {
	r.acquire.Merge(o.acquire)
	r.wait.Merge(o.wait)
	r.release.Merge(o.release)
	r.acquired += o.acquired
	r.notAcquired += o.notAcquired
	for k, v := range o.failed {
		r.failed[k] += v
	}
	for k, v := range o.afterAcquire {
		r.afterAcquire[k] += v
	}
	for k, v := range o.firstErr {
		if _, ok := r.firstErr[k]; !ok {
			r.firstErr[k] = v
		}
	}
}

// Latency holds the percentiles of one measure, in microseconds.
type Latency struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_us"`
	P90   float64 `json:"p90_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
	Max   float64 `json:"max_us"`
}

func latencyOf(h *hdrhistogram.Histogram) Latency {
	us := func(ns int64) float64 { return float64(ns) / 1e3 }
	if h.TotalCount() == 0 {
		return Latency{}
	}
	return Latency{
		Count: h.TotalCount(),
		P50:   us(h.ValueAtQuantile(50)),
		P90:   us(h.ValueAtQuantile(90)),
		P99:   us(h.ValueAtQuantile(99)),
		P999:  us(h.ValueAtQuantile(99.9)),
		Max:   us(h.Max()),
	}
}

// Side is what one side of a run (distlock, or the store's floor) did.
// Attempts = Acquired + NotAcquired + Errors; Errors is the sum of
// ErrorsByKind. Lost and ReleaseErrors count locks that were acquired.
type Side struct {
	Name           string            `json:"name"`
	ElapsedSeconds float64           `json:"elapsed_seconds"`
	Attempts       int64             `json:"attempts"`
	Acquired       int64             `json:"acquired"`
	NotAcquired    int64             `json:"not_acquired"`
	Errors         int64             `json:"errors"`
	ErrorsByKind   map[string]int64  `json:"errors_by_kind"`
	Lost           int64             `json:"lost"`
	ReleaseErrors  int64             `json:"release_errors"`
	FirstErrors    map[string]string `json:"first_errors,omitempty"`
	OpsPerSecond   float64           `json:"ops_per_second"`
	Acquire        Latency           `json:"acquire"`
	Wait           Latency           `json:"wait"`
	Release        Latency           `json:"release"`
}

// side turns the merged record of a side into its report.
func (r *recorder) side(name string, elapsed time.Duration) Side {
	s := Side{
		Name:           name,
		ElapsedSeconds: elapsed.Seconds(),
		Acquired:       r.acquired,
		NotAcquired:    r.notAcquired,
		ErrorsByKind:   r.failed,
		Lost:           r.afterAcquire[KindLost],
		ReleaseErrors:  r.afterAcquire[KindRelease],
		Acquire:        latencyOf(r.acquire),
		Wait:           latencyOf(r.wait),
		Release:        latencyOf(r.release),
	}
	if len(r.firstErr) > 0 {
		s.FirstErrors = r.firstErr
	}
	for _, n := range r.failed {
		s.Errors += n
	}
	s.Attempts = s.Acquired + s.NotAcquired + s.Errors
	if elapsed > 0 {
		s.OpsPerSecond = float64(s.Attempts) / elapsed.Seconds()
	}
	return s
}

// sortedKinds returns the keys of m in order.
func sortedKinds(m map[string]int64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
