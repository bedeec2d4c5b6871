package locktest

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Contend is the contended-handoff benchmark: b.N acquisitions of one key by
// goroutines lockers, each looping Lock, Release, then 1ms of work outside
// the lock. It reports acquisitions per second, the wait of an acquisition at
// p50, p99 and max, and the largest share of acquisitions one goroutine got
// (fairness: 1/n is perfect). lock is called by goroutine i and returns the
// release; two holders inside at once fail the benchmark.
func Contend(b *testing.B, lockers int, lock func(ctx context.Context, i int) (release func() error, err error)) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var t tally
	b.ResetTimer()
	if err := t.round(ctx, lockers, time.Millisecond, lock, b.N); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(t.rate(), "acq/s")
	b.ReportMetric(t.waitMs(0.5), "p50-wait-ms")
	b.ReportMetric(t.waitMs(0.99), "p99-wait-ms")
	b.ReportMetric(t.waitMs(1), "max-wait-ms")
	b.ReportMetric(100*t.topShare()/float64(lockers), "max-share-%")
	b.ReportMetric(0, "ns/op")
}

// Contender is one way of taking a key that CompareContended measures: a
// backend, or the store's raw peer that the backend is compared with.
type Contender struct {
	Name string
	// Lockers, if positive, is how many goroutines loop on Lock, instead of
	// the Load's.
	Lockers int
	// Lock takes the key for goroutine i and returns the release.
	Lock func(ctx context.Context, i int) (release func() error, err error)
}

// Load is how CompareContended drives its contenders.
type Load struct {
	// Lockers is how many goroutines loop lock, release, think (1 if 0).
	Lockers int
	// Think is the work each goroutine does outside the lock after a
	// release; a contender with one locker does none (its rate is the
	// store's reference).
	Think time.Duration
	// Requests, if not nil, reads a server-wide request counter.
	Requests func() int64
}

// CompareContended makes b.N acquisitions with each contender, in
// alternating rounds of 256 so that all see the same load on a shared
// machine. It reports, per contender, acquisitions per second
// ("<name>-acq/s"); with several lockers the p99 and max wait of an
// acquisition and the largest share one goroutine got relative to a fair
// share ("-top/fair"); with load.Requests the requests per acquisition
// ("-req/acq"); and for every contender after the first its throughput
// relative to the first's ("<first>/<name>"). Two holders inside at once
// fail b.
func CompareContended(b *testing.B, load Load, cs ...Contender) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ts := make([]tally, len(cs))
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 256)
		for k, c := range cs {
			lockers, think := max(load.Lockers, 1), load.Think
			if c.Lockers > 0 {
				lockers = c.Lockers
			}
			if lockers == 1 {
				think = 0
			}
			var before int64
			if load.Requests != nil {
				before = load.Requests()
			}
			if err := ts[k].round(ctx, lockers, think, c.Lock, n); err != nil {
				b.Fatalf("%s: %v", c.Name, err)
			}
			if load.Requests != nil {
				ts[k].requests += load.Requests() - before - 1 // the counter's own request
			}
		}
		done += n
	}
	b.StopTimer()
	for k, c := range cs {
		t := &ts[k]
		b.ReportMetric(t.rate(), c.Name+"-acq/s")
		if len(t.counts) > 1 {
			b.ReportMetric(t.waitMs(0.99), c.Name+"-p99-ms")
			b.ReportMetric(t.waitMs(1), c.Name+"-max-ms")
			b.ReportMetric(t.topShare(), c.Name+"-top/fair")
		}
		if load.Requests != nil {
			b.ReportMetric(float64(t.requests)/float64(len(t.waits)), c.Name+"-req/acq")
		}
		if k > 0 {
			b.ReportMetric(ts[0].took.Seconds()/t.took.Seconds(), cs[0].Name+"/"+c.Name)
		}
	}
	b.ReportMetric(0, "ns/op")
}

// tally is what the rounds of one contender measured.
type tally struct {
	took     time.Duration
	waits    []time.Duration // sorted once the rounds are over
	counts   []int           // acquisitions by goroutine
	requests int64
}

// round makes n acquisitions by lockers goroutines looping lock, release,
// think, and adds the wall time, each acquisition's wait and each
// goroutine's count to t.
func (t *tally) round(ctx context.Context, lockers int, think time.Duration, lock func(ctx context.Context, i int) (func() error, error), n int) error {
	if t.counts == nil {
		t.counts = make([]int, lockers)
	}
	var (
		left   atomic.Int64
		inside atomic.Int32
		mu     sync.Mutex
		wg     sync.WaitGroup
		errs   = make(chan error, lockers)
	)
	left.Store(int64(n))
	start := time.Now()
	for i := range lockers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				release, err := lock(ctx, i)
				if err != nil {
					errs <- err
					return
				}
				wait := time.Since(t0)
				if inside.Add(1) != 1 {
					errs <- errOverlap
				}
				inside.Add(-1)
				if err := release(); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				t.waits = append(t.waits, wait)
				t.counts[i]++
				mu.Unlock()
				if think > 0 {
					time.Sleep(think)
				}
			}
		})
	}
	wg.Wait()
	t.took += time.Since(start)
	close(errs)
	return <-errs
}

// rate is acquisitions per second.
func (t *tally) rate() float64 { return float64(len(t.waits)) / t.took.Seconds() }

// waitMs is the wait at quantile q, in milliseconds.
func (t *tally) waitMs(q float64) float64 {
	if !slices.IsSorted(t.waits) {
		slices.Sort(t.waits)
	}
	return float64(t.waits[int(q*float64(len(t.waits)-1))]) / float64(time.Millisecond)
}

// topShare is the largest share of acquisitions one goroutine got, over a
// fair share.
func (t *tally) topShare() float64 {
	return float64(slices.Max(t.counts)) * float64(len(t.counts)) / float64(len(t.waits))
}

type overlapError struct{}

func (overlapError) Error() string { return "two holders inside the critical section at once" }

var errOverlap error = overlapError{}
