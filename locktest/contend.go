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
	var (
		left   atomic.Int64
		inside atomic.Int32
		mu     sync.Mutex
		waits  []time.Duration
		counts = make([]int, lockers)
		errs   = make(chan error, lockers)
		wg     sync.WaitGroup
	)
	left.Store(int64(b.N))
	b.ResetTimer()
	start := time.Now()
	for i := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
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
				waits = append(waits, wait)
				counts[i]++
				mu.Unlock()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	slices.Sort(waits)
	at := func(q float64) float64 {
		return float64(waits[int(q*float64(len(waits)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(len(waits))/elapsed.Seconds(), "acq/s")
	b.ReportMetric(at(0.5), "p50-wait-ms")
	b.ReportMetric(at(0.99), "p99-wait-ms")
	b.ReportMetric(at(1), "max-wait-ms")
	b.ReportMetric(100*float64(slices.Max(counts))/float64(len(waits)), "max-share-%")
	b.ReportMetric(0, "ns/op")
}

type overlapError struct{}

func (overlapError) Error() string { return "two holders inside the critical section at once" }

var errOverlap error = overlapError{}
