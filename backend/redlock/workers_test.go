package redlock

import (
	"sync"
	"testing"
	"time"
)

// TestWorkersRunAtOnce: jobs given to the pool while others are still
// running must not wait for them (a bound would queue one node's requests
// behind another's); workers idle from one sweep to the next must leave;
// close must wait for every worker to leave, which the package's leak
// check then confirms.
func TestWorkersRunAtOnce(t *testing.T) {
	w := newWorkers()
	for round := range 3 { // later rounds run on the workers of the first
		const jobs = 8
		var started, release sync.WaitGroup
		started.Add(jobs)
		release.Add(1)
		done := make(chan struct{}, jobs)
		for range jobs {
			w.run(func() {
				started.Done()
				release.Wait()
				done <- struct{}{}
			})
		}
		all := make(chan struct{})
		go func() { started.Wait(); close(all) }()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			t.Fatalf("round %d: %d jobs given at once did not all start", round, jobs)
		}
		release.Done()
		for range jobs {
			<-done
		}
	}
	// A worker counts itself idle only after its job sent done, so a sweep
	// right after the last done may not see it yet: sweep until every
	// worker that stayed idle from one sweep to the next has left.
	deadline := time.Now().Add(5 * time.Second)
	for w.retireIdle(); w.idle.Load() != 0; w.retireIdle() {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers left after sweeps for 5s, want 0", w.idle.Load())
		}
		time.Sleep(time.Millisecond)
	}
	w.close()
	ran := make(chan struct{})
	w.run(func() { close(ran) })
	<-ran // after close, a job still runs
}
