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

// ReleaseGrace is how long past a timed run's end its last releases may
// take, and how long closing the clients may take after them: the duration
// is a deadline for every attempt, those in flight included, and the run
// ends at most twice ReleaseGrace later.
const ReleaseGrace = 500 * time.Millisecond

// StallLimit ends a run once the store has answered none of its attempts
// for that long; it also bounds each attempt beyond its wait, so that an
// attempt on a store that hangs ends.
const StallLimit = 5 * time.Second

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
	// Stalled is set when the run stopped because the store answered
	// none of its attempts for StallLimit.
	Stalled bool `json:"stalled,omitempty"`
	// CloseTimedOut is set when the clients did not close within
	// ReleaseGrace; what they still held expires at its lease.
	CloseTimedOut bool   `json:"close_timed_out,omitempty"`
	Sides         []Side `json:"sides"`
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
	end   time.Time // a timed run's deadline; zero for a counted run

	answered atomic.Int64 // when the store last answered an attempt, in Unix nanoseconds
	stalled  atomic.Bool  // the store answered nothing for StallLimit: the run stops
}

// Run opens cfg.Clients clients with open and, with cfg.Floor, the store's
// raw commands for cfg.URL, then runs the load until the count is done, the
// duration is over, the store stops answering (StallLimit) or ctx ends. An
// interrupted run still returns its report, with Interrupted set. The
// clients and the floor are closed on return, within ReleaseGrace.
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
	if cfg.Floor {
		ft, err := floor.Open(ctx, cfg.URL, floor.Config{Workers: cfg.Workers, Clients: cfg.Clients, Lease: cfg.Lease, Backend: lt.clients[0].Backend()})
		if err != nil {
			_, cerr := r.close(ReleaseGrace)
			return nil, errors.Join(err, cerr)
		}
		r.add("floor", floorTarget{ft})
	}
	stop := r.startProgress()
	r.schedule(ctx)
	stop()
	rep = r.report(ctx)
	closed, err := r.close(ReleaseGrace)
	rep.CloseTimedOut = !closed
	return rep, err
}

// add makes a side of t.
func (r *runner) add(name string, t target) {
	s := &side{name: name, target: t, recs: make([]*recorder, r.cfg.Workers)}
	for i := range s.recs {
		s.recs[i] = newRecorder()
	}
	r.sides = append(r.sides, s)
}

// close closes every side's target, waiting at most grace for them: on a
// store that stopped answering, a client's close would wait out its own
// release budget. Closes still going on then are left to finish in the
// background, and what they still hold expires at its lease; closed is
// false then.
func (r *runner) close(grace time.Duration) (closed bool, err error) {
	done := make(chan error, 1)
	go func() {
		var errs []error
		for _, s := range r.sides {
			errs = append(errs, s.target.close())
		}
		done <- errors.Join(errs...)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-done:
		return true, err
	case <-t.C:
		return false, nil
	}
}

// schedule runs the rounds: one for the whole run without a floor, else
// alternating rounds of each side. A timed run's duration is the deadline
// of every attempt in it.
func (r *runner) schedule(ctx context.Context) {
	r.answered.Store(time.Now().UnixNano())
	ctx, stop := r.watchStall(ctx)
	defer stop()
	if r.cfg.Count > 0 {
		per := r.cfg.Count
		if len(r.sides) > 1 {
			per = int64(roundPerWorker * r.cfg.Workers)
		}
		for done := int64(0); done < r.cfg.Count && ctx.Err() == nil && !r.stalled.Load(); done += per {
			n := min(per, r.cfg.Count-done)
			for _, s := range r.sides {
				r.round(ctx, s, newBudget(n, time.Time{}))
			}
		}
		return
	}
	r.end = time.Now().Add(r.cfg.Duration)
	ctx, cancel := context.WithDeadline(ctx, r.end)
	defer cancel()
	for ctx.Err() == nil && !r.stalled.Load() {
		slice := time.Until(r.end) / time.Duration(len(r.sides))
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
	for !r.stall() && b.take(ctx) {
		r.attempt(ctx, s, w, r.key(rng))
		if !sleep(ctx, r.cfg.Think) {
			return
		}
	}
}

// watchStall returns ctx, also cancelled once the store has answered
// nothing for StallLimit, so that the attempts in flight end then rather
// than at their own timeout, which may have started after the last answer
// and would let another round begin; stop ends the watch.
func (r *runner) watchStall(ctx context.Context) (_ context.Context, stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(StallLimit / 50)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if r.stall() {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, func() { cancel(); <-exited }
}

// stall reports whether the run has stopped for want of answers, and stops
// it once the store has answered nothing for StallLimit.
func (r *runner) stall() bool {
	if !r.stalled.Load() && time.Since(time.Unix(0, r.answered.Load())) > StallLimit {
		r.stalled.Store(true)
	}
	return r.stalled.Load()
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
	actx, cancel := context.WithTimeout(ctx, r.cfg.Wait+StallLimit)
	release, wait, err := s.target.lock(actx, w, key)
	cancel()
	took := time.Since(start)
	if err != nil {
		if kind := failureKind(ctx, err); kind != "" {
			s.count.errors.Add(1)
			rec.note(rec.failed, kind, err)
		} else {
			r.answered.Store(time.Now().UnixNano())
			rec.notAcquired++
		}
		return
	}
	r.answered.Store(time.Now().UnixNano())
	rec.acquired++
	record(rec.acquire, took)
	record(rec.wait, wait)
	sleep(ctx, r.cfg.Hold)
	by := time.Now().Add(releaseBudget)
	if !r.end.IsZero() && r.end.Add(ReleaseGrace).Before(by) {
		by = r.end.Add(ReleaseGrace)
	}
	rctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), by)
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
		Interrupted: ctx.Err() != nil, Stalled: r.stalled.Load()}
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
