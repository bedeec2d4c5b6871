package bench_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	_ "github.com/distlock/distlock/backend/memlock"
	_ "github.com/distlock/distlock/backend/memlock/memtool"
	_ "github.com/distlock/distlock/backend/redislock/redistool"
	"github.com/distlock/distlock/cmd/distlock/internal/bench"
	"github.com/distlock/distlock/storetool/floor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// opener opens clients on rawURL and counts them.
func opener(rawURL string, opened *atomic.Int64) bench.OpenFunc {
	return func(ctx context.Context, opts ...distlock.ClientOption) (*distlock.Client, error) {
		opened.Add(1)
		return distlock.Open(ctx, rawURL, opts...)
	}
}

// run runs cfg against cfg.URL and fails t on an error.
func run(t *testing.T, ctx context.Context, cfg bench.Config) *bench.Report {
	t.Helper()
	var opened atomic.Int64
	rep, err := bench.Run(ctx, cfg, opener(cfg.URL, &opened))
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkSide checks that s's counts add up and that its latencies count
// what they should.
func checkSide(t *testing.T, s bench.Side, attempts int64) {
	t.Helper()
	var errs int64
	for _, n := range s.ErrorsByKind {
		errs += n
	}
	if s.Attempts != attempts || s.Acquired+s.NotAcquired+s.Errors != s.Attempts || errs != s.Errors {
		t.Errorf("%s: attempts %d (want %d), acquired %d + not acquired %d + errors %d (by kind %v)",
			s.Name, s.Attempts, attempts, s.Acquired, s.NotAcquired, s.Errors, s.ErrorsByKind)
	}
	if s.Acquire.Count != s.Acquired || s.Release.Count != s.Acquired {
		t.Errorf("%s: acquire latency counts %d, release %d, want %d", s.Name, s.Acquire.Count, s.Release.Count, s.Acquired)
	}
	if s.Acquired > 0 && !(s.Acquire.P50 > 0 && s.Acquire.P50 <= s.Acquire.P90 && s.Acquire.P90 <= s.Acquire.P99 &&
		s.Acquire.P99 <= s.Acquire.P999 && s.Acquire.P999 <= s.Acquire.Max) {
		t.Errorf("%s: acquire percentiles out of order: %+v", s.Name, s.Acquire)
	}
	if s.OpsPerSecond <= 0 || s.ElapsedSeconds <= 0 {
		t.Errorf("%s: %v ops/s over %vs", s.Name, s.OpsPerSecond, s.ElapsedSeconds)
	}
}

func memConfig() bench.Config {
	return bench.Config{URL: "mem://", Workers: 8, Clients: 2, Keys: 4, Contention: 0.5, Count: 2000,
		Lease: time.Minute, Prefix: "bench/"}
}

func TestMemCountsAddUp(t *testing.T) {
	rep := run(t, context.Background(), memConfig())
	if len(rep.Sides) != 1 || rep.Ratio != nil || rep.Interrupted {
		t.Fatalf("sides %d, ratio %v, interrupted %v", len(rep.Sides), rep.Ratio, rep.Interrupted)
	}
	s := rep.Sides[0]
	checkSide(t, s, 2000)
	// Eight workers on four keys, half the attempts on one, without waiting:
	// some find their key held.
	if s.NotAcquired == 0 || s.Errors != 0 || s.Lost != 0 || s.ReleaseErrors != 0 {
		t.Errorf("not acquired %d, errors %d, lost %d, release errors %d", s.NotAcquired, s.Errors, s.Lost, s.ReleaseErrors)
	}
}

// Clients of mem:// share one store: with one key and a wait, every attempt
// gets the lock, some after waiting for a holder on another client.
func TestMemWaitAcrossClients(t *testing.T) {
	cfg := memConfig()
	cfg.Keys, cfg.Workers, cfg.Count, cfg.Wait, cfg.Hold = 1, 4, 40, 10*time.Second, time.Millisecond
	s := run(t, context.Background(), cfg).Sides[0]
	checkSide(t, s, 40)
	if s.Acquired != 40 || s.Wait.Max < float64(time.Millisecond.Microseconds())/2 {
		t.Errorf("acquired %d of 40, longest wait %vµs: the workers did not queue for one key", s.Acquired, s.Wait.Max)
	}
}

// A hold longer than the lease loses the lock; the count says so.
func TestLostCounted(t *testing.T) {
	cfg := memConfig()
	cfg.Workers, cfg.Clients, cfg.Keys, cfg.Count, cfg.Lease, cfg.Hold = 2, 1, 8, 4, 20*time.Millisecond, 60*time.Millisecond
	s := run(t, context.Background(), cfg).Sides[0]
	checkSide(t, s, 4)
	if s.Lost != s.Acquired || s.Acquired == 0 {
		t.Errorf("lost %d of %d acquired (%+v)", s.Lost, s.Acquired, s)
	}
}

// Ending the context ends the run at once; the report covers what ran.
func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := memConfig()
	cfg.Count, cfg.Duration, cfg.Hold, cfg.Wait = 0, time.Minute, time.Millisecond, time.Minute
	var snapshots atomic.Int64
	cfg.ProgressInterval = 20 * time.Millisecond
	cfg.Progress = func(p bench.Progress) {
		if p.Attempts > 0 && snapshots.Add(1) == 2 {
			cancel()
		}
	}
	start := time.Now()
	rep := run(t, ctx, cfg)
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the run took %v after its context ended", took)
	}
	s := rep.Sides[0]
	if !rep.Interrupted || s.Attempts == 0 {
		t.Fatalf("interrupted %v, attempts %d", rep.Interrupted, s.Attempts)
	}
	checkSide(t, s, s.Attempts)
}

func TestMemFloor(t *testing.T) {
	cfg := memConfig()
	cfg.Floor = true
	rep := run(t, context.Background(), cfg)
	if len(rep.Sides) != 2 || rep.Sides[1].Name != "floor" || rep.Ratio == nil || rep.Ratio.Throughput <= 0 {
		t.Fatalf("sides %+v, ratio %+v", rep.Sides, rep.Ratio)
	}
	for _, s := range rep.Sides {
		checkSide(t, s, 2000)
	}
}

func TestValidate(t *testing.T) {
	for name, change := range map[string]func(*bench.Config){
		"negative concurrency": func(c *bench.Config) { c.Workers = -1 },
		"more clients":         func(c *bench.Config) { c.Clients = c.Workers + 1 },
		"no keys":              func(c *bench.Config) { c.Keys = 0 },
		"contention 1.5":       func(c *bench.Config) { c.Contention = 1.5 },
		"both bounds":          func(c *bench.Config) { c.Duration = time.Second },
		"no bound":             func(c *bench.Config) { c.Count = 0 },
		"count too high":       func(c *bench.Config) { c.Count = bench.MaxCount + 1 },
		"duration too long":    func(c *bench.Config) { c.Count, c.Duration = 0, bench.MaxDuration+1 },
		"zero lease":           func(c *bench.Config) { c.Lease = 0 },
		"lease too short":      func(c *bench.Config) { c.Lease = distlock.MinLease - 1 },
		"negative wait":        func(c *bench.Config) { c.Wait = -time.Second },
		"negative hold":        func(c *bench.Config) { c.Hold = -time.Second },
		"negative think":       func(c *bench.Config) { c.Think = -time.Second },
	} {
		cfg := memConfig()
		change(&cfg)
		if err := cfg.Validate(); !errors.Is(err, bench.ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
		var opened atomic.Int64
		if _, err := bench.Run(context.Background(), cfg, opener(cfg.URL, &opened)); err == nil || opened.Load() != 0 {
			t.Errorf("%s: Run: %v after opening %d clients", name, err, opened.Load())
		}
	}
	if err := memConfig().Validate(); err != nil {
		t.Errorf("a good configuration: %v", err)
	}
}

func TestUnknownFloor(t *testing.T) {
	cfg := memConfig()
	cfg.URL, cfg.Floor = "redis-cluster://127.0.0.1:1", true
	err := cfg.Validate()
	if !errors.Is(err, floor.ErrNoFloor) || !strings.Contains(err.Error(), "redis-cluster://") ||
		!strings.Contains(err.Error(), "not written yet") || !strings.Contains(err.Error(), strings.Join(floor.Schemes(), ", ")) {
		t.Errorf("got %v, want ErrNoFloor naming the scheme, the reason and the known ones", err)
	}
	cfg.URL = "nope://127.0.0.1:1"
	if err := cfg.Validate(); !errors.Is(err, floor.ErrNoFloor) || !strings.Contains(err.Error(), `"nope://"`) {
		t.Errorf("unknown scheme: %v", err)
	}
}
