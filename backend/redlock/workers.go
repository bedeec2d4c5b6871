package redlock

import (
	"sync"
	"sync/atomic"
	"time"
)

// workers runs the requests that Backend sends to its nodes at once on
// goroutines that outlive them. A request to a node runs deep into its
// client, and a goroutine started for it grew its stack on every call: a
// sixth of the client's CPU under load (BenchmarkRedlock). A worker keeps
// its stack for the next request. Workers are started when none is idle;
// every retireEvery, as many leave as were idle all along since the last
// time, and all leave when the pool closes.
//
// It is written here rather than taken from a goroutine pool library: it
// needs no bound (a bound would queue one node's requests behind another's)
// and no more than this.
type workers struct {
	jobs chan func() // a nil job makes its worker leave
	done chan struct{}
	wg   sync.WaitGroup
	// idle counts the workers waiting for a job; fewestIdle is the least
	// it was since the last retirement.
	idle, fewestIdle atomic.Int64
}

// retireEvery is how often the workers that stayed idle leave.
const retireEvery = 5 * time.Second

func newWorkers() *workers {
	w := &workers{jobs: make(chan func()), done: make(chan struct{})}
	w.wg.Go(w.retire)
	return w
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

// work runs job, then every job it receives, until it receives nil or the
// pool closes.
func (w *workers) work(job func()) {
	for job != nil {
		job()
		w.idle.Add(1)
		select {
		case job = <-w.jobs:
		case <-w.done:
			job = nil
		}
		idle := w.idle.Add(-1)
		for fewest := w.fewestIdle.Load(); idle < fewest && !w.fewestIdle.CompareAndSwap(fewest, idle); {
			fewest = w.fewestIdle.Load()
		}
	}
}

// retire runs retireIdle every retireEvery until the pool closes.
func (w *workers) retire() {
	t := time.NewTicker(retireEvery)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
			w.retireIdle()
		}
	}
}

// retireIdle makes as many workers leave as stayed idle since it last ran.
func (w *workers) retireIdle() {
	for n := w.fewestIdle.Swap(w.idle.Load()); n > 0; n-- {
		select {
		case w.jobs <- nil:
		default: // none idle now
			return
		}
	}
}

// close makes every worker leave once its job is done, and waits for them.
func (w *workers) close() {
	close(w.done)
	w.wg.Wait()
}
