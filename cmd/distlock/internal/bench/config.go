// Package bench is distlock's load generator: workers spread over several
// clients take and release locks on a set of keys, one of them hot, and the
// run reports throughput, latency percentiles and every outcome by kind. With
// a floor it also runs the store's own raw commands for the same work, in
// alternating rounds, so that both see the same load.
package bench

import (
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/storetool/floor"
)

// Limits on a run, so that a typo cannot start one that never ends or
// exhausts memory.
const (
	MaxWorkers  = 4096
	MaxKeys     = 10_000_000
	MaxCount    = 1_000_000_000
	MaxDuration = 24 * time.Hour
)

// ErrInvalidConfig marks a configuration that Validate refuses.
var ErrInvalidConfig = errors.New("bench: invalid configuration")

// Config describes a run. Exactly one of Duration and Count is set.
type Config struct {
	URL        string        // the store, as for distlock.Open; the floor reads it too
	Workers    int           // goroutines taking locks
	Clients    int           // distinct clients (connections) the workers are spread over
	Keys       int           // distinct keys; key 0 is the hot key
	Contention float64       // share of attempts on the hot key, 0..1
	Duration   time.Duration // the whole run, floor rounds included
	Count      int64         // attempts through distlock (and as many on the floor)
	Lease      time.Duration // WithLease of every lock; no renewal
	Wait       time.Duration // WithWait of every lock; 0 tries once
	Hold       time.Duration // time a worker holds each lock it gets
	Think      time.Duration // time a worker pauses after each attempt, outside the lock
	Prefix     string        // prefix of every key
	Floor      bool          // also run the store's raw commands
	// Progress, if set, is called every ProgressInterval (default 1s) while
	// the run goes on.
	Progress         func(Progress)
	ProgressInterval time.Duration
}

// Progress is a snapshot of a run in flight.
type Progress struct {
	Elapsed  time.Duration
	Attempts int64   // all attempts so far, floor included
	Rate     float64 // attempts per second since the previous snapshot
	Errors   int64   // failed attempts so far (not acquired is not an error)
}

// Validate checks c without touching any store. Its messages name the
// flags of distlock bench.
func (c Config) Validate() error {
	checks := []struct {
		bad bool
		msg string
	}{
		{c.Workers < 1 || c.Workers > MaxWorkers, fmt.Sprintf("--concurrency %d: want 1..%d", c.Workers, MaxWorkers)},
		{c.Clients < 1 || c.Clients > c.Workers, fmt.Sprintf("--clients %d: want 1..--concurrency (%d)", c.Clients, c.Workers)},
		{c.Keys < 1 || c.Keys > MaxKeys, fmt.Sprintf("--keys %d: want 1..%d", c.Keys, MaxKeys)},
		{!(c.Contention >= 0 && c.Contention <= 1), fmt.Sprintf("--contention %g: want a share from 0 to 1", c.Contention)},
		{(c.Duration == 0) == (c.Count == 0), "give exactly one of --duration and --count"},
		{c.Duration < 0 || c.Duration > MaxDuration, fmt.Sprintf("--duration %v: want more than 0, at most %v", c.Duration, MaxDuration)},
		{c.Count < 0 || c.Count > MaxCount, fmt.Sprintf("--count %d: want 1..%d", c.Count, MaxCount)},
		{c.Lease < distlock.MinLease, fmt.Sprintf("--lease %v: want at least %v", c.Lease, distlock.MinLease)},
		{c.Wait < 0, fmt.Sprintf("--wait %v: want 0 (try once) or more", c.Wait)},
		{c.Hold < 0, fmt.Sprintf("--hold %v: want 0 or more", c.Hold)},
		{c.Think < 0, fmt.Sprintf("--think %v: want 0 or more", c.Think)},
		{c.ProgressInterval < 0, fmt.Sprintf("progress interval %v: want 0 (1s) or more", c.ProgressInterval)},
	}
	for _, ch := range checks {
		if ch.bad {
			return fmt.Errorf("%w: %s", ErrInvalidConfig, ch.msg)
		}
	}
	if c.Floor {
		return floor.Known(c.URL)
	}
	return nil
}
