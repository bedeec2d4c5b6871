package locktest

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Op is one way of taking and freeing a key that Compare measures.
type Op struct {
	// Name labels the op's metrics.
	Name string
	// Do takes and frees key once.
	Do func(ctx context.Context, key string) error
}

// Compare measures ops against each other in one benchmark. It makes b.N
// calls of each op, in alternating rounds of at most 50 calls per caller, so
// that all of them see the same load on a shared machine. Each caller works
// on a key of its own, the same in every round: one caller when mode is
// "serial" (latency), else 8 per CPU (throughput). It reports each op's time
// per call as "<name>-ns/op", and for every op after the first, the first
// one's time divided by its own as "<first>/<name>": the op's throughput
// relative to the first's, the reference.
func Compare(b *testing.B, mode string, ops ...Op) {
	callers := 1
	if mode != "serial" {
		callers = 8 * runtime.GOMAXPROCS(0)
	}
	took := make([]time.Duration, len(ops))
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(b.N-done, 50*callers)
		for i, op := range ops {
			took[i] += round(b, callers, n, op)
		}
		if b.Failed() {
			return
		}
		done += n
	}
	b.StopTimer()
	for i, op := range ops {
		b.ReportMetric(float64(took[i].Nanoseconds())/float64(b.N), op.Name+"-ns/op")
		if i > 0 {
			b.ReportMetric(took[0].Seconds()/took[i].Seconds(), ops[0].Name+"/"+op.Name)
		}
	}
}

// round makes n calls of op from callers goroutines, caller i on key
// "bench-<i+1>", and returns the wall time they took.
func round(b *testing.B, callers, n int, op Op) time.Duration {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("bench-%d", i+1)
			for next.Add(1) <= int64(n) {
				if err := op.Do(ctx, key); err != nil {
					b.Errorf("%s: %v", op.Name, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start)
}
