package redlock

import (
	"sync"
	"time"
)

// workers runs the requests that Backend sends to its nodes at once on
// goroutines that outlive them. A request to a node runs deep into its
// client, and a goroutine started for it grew its stack on every call: a
// sixth of the client's CPU under load (BenchmarkRedlock). A worker keeps
// its stack for the next request. Workers are started when none is idle,
// and leave after idleWorker without work, or when the pool closes.
//
// It is written here rather than taken from a goroutine pool library: it
// needs no bound (a bound would queue one node's requests behind another's)
// and no more than this.
type workers struct {
	jobs chan func()
	done chan struct{}
	wg   sync.WaitGroup
}

// idleWorker is how long a worker waits for a job before it leaves.
const idleWorker = 5 * time.Second

func newWorkers() *workers {
	return &workers{jobs: make(chan func()), done: make(chan struct{})}
}

// run runs job on an idle worker, or on a new one if none is idle; after
// close, on a goroutine of its own.
func (w *workers) run(job func()) {
	select {
	case w.jobs <- job:
	case <-w.done:
		go job()
	default:
		w.wg.Go(func() { w.work(job) })
	}
}

// work runs job, then every job it receives, until it was idle for
// idleWorker or the pool closed.
func (w *workers) work(job func()) {
	idle := time.NewTimer(idleWorker)
	defer idle.Stop()
	for {
		job()
		idle.Reset(idleWorker)
		select {
		case job = <-w.jobs:
		case <-idle.C:
			return
		case <-w.done:
			return
		}
	}
}

// close makes every worker leave once its job is done, and waits for them.
func (w *workers) close() {
	close(w.done)
	w.wg.Wait()
}
