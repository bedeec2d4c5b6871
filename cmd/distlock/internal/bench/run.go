package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/storetool/floor"
)

// roundPerWorker is how many attempts each worker makes per round when the
// floor alternates with distlock in a counted run; roundTime is how long a
// side's round lasts in a timed run. Short rounds let both sides see the
// same load from elsewhere on the machine.
const (
	roundPerWorker = 50
	roundTime      = 500 * time.Millisecond
)

// releaseBudget bounds a release, which runs even after the run is
// interrupted so that no lock is left behind.
const releaseBudget = 5 * time.Second

// OpenFunc opens one client on the store under test with the given options.
type OpenFunc func(ctx context.Context, opts ...distlock.ClientOption) (*distlock.Client, error)

// Report is the outcome of a run: the distlock side, then the floor's.
type Report struct {
	Backend     string  `json:"backend"`
	Workers     int     `json:"concurrency"`
	Clients     int     `json:"clients"`
	Keys        int     `json:"keys"`
	Contention  float64 `json:"contention"`
	Lease       string  `json:"lease"`
	Wait        string  `json:"wait"`
	Hold        string  `json:"hold"`
	Think       string  `json:"think"`
	Interrupted bool    `json:"interrupted"`
	Sides       []Side  `json:"sides"`
	// Ratio compares distlock with the floor; nil without a floor.
	Ratio *Ratio `json:"ratio,omitempty"`
}

// Ratio is distlock's figures over the floor's.
type Ratio struct {
	Throughput float64 `json:"throughput"`  // distlock ops/s ÷ floor ops/s
	AcquireP50 float64 `json:"acquire_p50"` // distlock p50 acquire ÷ floor p50 acquire
}

// target is what a side takes locks through.
type target interface {
	// lock tries once (or waits, for distlock with a wait) to take key for
	// worker w. It returns the release and how long the attempt waited for
	// the key, or an error matching distlock.ErrNotAcquired if the key
	// stayed held.
	lock(ctx context.Context, w int, key string) (release func(context.Context) error, wait time.Duration, err error)
	close() error
}

// floorTarget is a store's floor as a side's target: it tries each key
// once, so the key being held never costs it a wait.
type floorTarget struct{ floor.Target }

// lock takes key once through the floor.
func (t floorTarget) lock(ctx context.Context, w int, key string) (func(context.Context) error, time.Duration, error) {
	release, err := t.Lock(ctx, w, key)
	return release, 0, err
}

// close closes the floor.
func (t floorTarget) close() error { return t.Close() }

// side is one target's share of a run.
type side struct {
	name    string
	target  target
	recs    []*recorder // one per worker
	count   counters
	elapsed time.Duration
}

// runner holds what a run needs.
type runner struct {
	cfg   Config
	sides []*side
}

// Run opens cfg.Clients clients with open and, with cfg.Floor, the store's
// raw commands for cfg.URL, then runs the load until the count is done, the
// duration is over or ctx ends. An interrupted run still returns its report,
// with Interrupted set. The clients and the floor are closed on return.
func Run(ctx context.Context, cfg Config, open OpenFunc) (rep *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	lt, err := openClients(ctx, cfg, open)
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg}
	r.add("distlock", lt)
	defer func() { err = errors.Join(err, r.close()) }()
	if cfg.Floor {
		ft, err := floor.Open(ctx, cfg.URL, floor.Config{Workers: cfg.Workers, Clients: cfg.Clients, Lease: cfg.Lease, Backend: lt.clients[0].Backend()})
		if err != nil {
			return nil, err
		}
		r.add("floor", floorTarget{ft})
	}
	stop := r.startProgress()
	r.schedule(ctx)
	stop()
	return r.report(ctx), nil
}

// add makes a side of t.
func (r *runner) add(name string, t target) {
	s := &side{name: name, target: t, recs: make([]*recorder, r.cfg.Workers)}
	for i := range s.recs {
		s.recs[i] = newRecorder()
	}
	r.sides = append(r.sides, s)
}

// close closes every side's target.
func (r *runner) close() error {
	var errs []error
	for _, s := range r.sides {
		errs = append(errs, s.target.close())
	}
	return errors.Join(errs...)
}

// schedule runs the rounds: one for the whole run without a floor, else
// alternating rounds of each side.
func (r *runner) schedule(ctx context.Context) {
	if r.cfg.Count > 0 {
		per := r.cfg.Count
		if len(r.sides) > 1 {
			per = int64(roundPerWorker * r.cfg.Workers)
		}
		for done := int64(0); done < r.cfg.Count && ctx.Err() == nil; done += per {
			n := min(per, r.cfg.Count-done)
			for _, s := range r.sides {
				r.round(ctx, s, newBudget(n, time.Time{}))
			}
		}
		return
	}
	end := time.Now().Add(r.cfg.Duration)
	for ctx.Err() == nil {
		slice := time.Until(end) / time.Duration(len(r.sides))
		if len(r.sides) > 1 {
			slice = min(slice, roundTime)
		}
		if slice < time.Millisecond {
			return
		}
		for _, s := range r.sides {
			r.round(ctx, s, newBudget(math.MaxInt64, time.Now().Add(slice)))
		}
	}
}

// budget is what a round may still do: attempts left, and a deadline.
type budget struct {
	left  atomic.Int64
	until time.Time // zero: none
}

func newBudget(n int64, until time.Time) *budget {
	b := &budget{until: until}
	b.left.Store(n)
	return b
}

// take reports whether one more attempt may start.
func (b *budget) take(ctx context.Context) bool {
	if ctx.Err() != nil || (!b.until.IsZero() && !time.Now().Before(b.until)) {
		return false
	}
	return b.left.Add(-1) >= 0
}

// round runs every worker on s until b is spent.
func (r *runner) round(ctx context.Context, s *side, b *budget) {
	start := time.Now()
	var wg sync.WaitGroup
	for w := range r.cfg.Workers {
		wg.Go(func() { r.work(ctx, s, w, b) })
	}
	wg.Wait()
	s.elapsed += time.Since(start)
}

// work is worker w's loop: attempt, hold, release, think.
func (r *runner) work(ctx context.Context, s *side, w int, b *budget) {
	rng := rand.New(rand.NewPCG(uint64(w), rand.Uint64()))
	for b.take(ctx) {
		r.attempt(ctx, s, w, r.key(rng))
		if !sleep(ctx, r.cfg.Think) {
			return
		}
	}
}

// key picks the key of the next attempt: the hot key (0) with probability
// Contention, else one of the others at random.
func (r *runner) key(rng *rand.Rand) string {
	if r.cfg.Keys == 1 || rng.Float64() < r.cfg.Contention {
		return r.cfg.Prefix + "hot"
	}
	return r.cfg.Prefix + strconv.Itoa(1+rng.IntN(r.cfg.Keys-1))
}

// attempt takes key once through s, holds it and releases it, recording
// every step in worker w's recorder.
func (r *runner) attempt(ctx context.Context, s *side, w int, key string) {
	rec := s.recs[w]
	s.count.attempts.Add(1)
	start := time.Now()
	release, wait, err := s.target.lock(ctx, w, key)
	took := time.Since(start)
	if err != nil {
		if kind := failureKind(ctx, err); kind != "" {
			s.count.errors.Add(1)
			rec.note(rec.failed, kind, err)
		} else {
			rec.notAcquired++
		}
		return
	}
	rec.acquired++
	record(rec.acquire, took)
	record(rec.wait, wait)
	sleep(ctx, r.cfg.Hold)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseBudget)
	defer cancel()
	start = time.Now()
	err = release(rctx)
	record(rec.release, time.Since(start))
	switch {
	case err == nil:
	case errors.Is(err, distlock.ErrLockLost) || errors.Is(err, distlock.ErrNotHeld):
		rec.note(rec.afterAcquire, KindLost, err)
	default:
		rec.note(rec.afterAcquire, KindRelease, err)
	}
}

// failureKind returns the kind of a failed attempt, or "" if the key was
// simply held until the attempt ended.
func failureKind(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return KindCanceled
	case errors.Is(err, distlock.ErrDegraded):
		return KindDegraded
	case errors.Is(err, distlock.ErrInvalidOption):
		return KindInvalid
	case errors.Is(err, distlock.ErrNotAcquired):
		return ""
	}
	return KindStore
}

// sleep waits d or until ctx ends, and reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// startProgress calls cfg.Progress every interval until the returned stop
// is called; stop returns once the reporter has ended.
func (r *runner) startProgress() (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	every := r.cfg.ProgressInterval
	if every == 0 {
		every = time.Second
	}
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(every)
		defer t.Stop()
		start, last, lastAt := time.Now(), int64(0), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				p := r.snapshot(now.Sub(start))
				p.Rate = float64(p.Attempts-last) / now.Sub(lastAt).Seconds()
				last, lastAt = p.Attempts, now
				r.cfg.Progress(p)
			}
		}
	}()
	return func() { close(done); <-ended }
}

// snapshot sums the sides' counters.
func (r *runner) snapshot(elapsed time.Duration) Progress {
	p := Progress{Elapsed: elapsed}
	for _, s := range r.sides {
		p.Attempts += s.count.attempts.Load()
		p.Errors += s.count.errors.Load()
	}
	return p
}

// report merges the workers' records into the run's report.
func (r *runner) report(ctx context.Context) *Report {
	c := r.cfg
	rep := &Report{Backend: redact(c.URL), Workers: c.Workers, Clients: c.Clients, Keys: c.Keys, Contention: c.Contention,
		Lease: c.Lease.String(), Wait: c.Wait.String(), Hold: c.Hold.String(), Think: c.Think.String(),
		Interrupted: ctx.Err() != nil}
	for _, s := range r.sides {
		all := newRecorder()
		for _, rec := range s.recs {
			all.merge(rec)
		}
		rep.Sides = append(rep.Sides, all.side(s.name, s.elapsed))
	}
	if len(rep.Sides) == 2 {
		rep.Ratio = ratio(rep.Sides[0], rep.Sides[1])
	}
	return rep
}

// ratio compares lock with floor; a figure the floor lacks gives 0.
func ratio(lock, floor Side) *Ratio {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	return &Ratio{Throughput: div(lock.OpsPerSecond, floor.OpsPerSecond), AcquireP50: div(lock.Acquire.P50, floor.Acquire.P50)}
}

// redact returns rawURL without its password.
func redact(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil && u.User != nil {
		return driver.RedactURL(u)
	}
	return rawURL
}

// openClients opens the clients of the distlock side. Every client of an
// in-process memlock store is a handle on the first one's store, so that
// they contend as clients of one server would.
func openClients(ctx context.Context, cfg Config, open OpenFunc) (*lockTarget, error) {
	t := &lockTarget{opts: []distlock.Option{distlock.WithLease(cfg.Lease), distlock.WithWait(cfg.Wait)}}
	opts := []distlock.ClientOption{distlock.WithObserver(callObserver{})}
	for i := range cfg.Clients {
		var c *distlock.Client
		var err error
		if m, ok := firstMem(t.clients); ok {
			c = distlock.New(m.Connect(), opts...)
		} else if c, err = open(ctx, opts...); err != nil {
			return nil, errors.Join(fmt.Errorf("bench: open client %d of %d: %w", i+1, cfg.Clients, err), t.close())
		}
		t.clients = append(t.clients, c)
	}
	return t, nil
}

// firstMem returns the memlock store under the first of clients, if any.
func firstMem(clients []*distlock.Client) (*memlock.Backend, bool) {
	if len(clients) == 0 {
		return nil, false
	}
	m, ok := clients[0].Backend().(*memlock.Backend)
	return m, ok
}
