package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/bench"
	"github.com/distlock/distlock/storetool/floor"
)

// newBenchCommand builds `distlock bench`.
func newBenchCommand(g *globals) *cobra.Command {
	cfg := bench.Config{Workers: 8, Clients: 1, Keys: 16, Lease: 30 * time.Second, Prefix: "bench/"}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a store through distlock, beside the store's own floor",
		Long: `bench takes and releases locks on the store as fast as its workers can, for
a duration or a count of attempts, and prints ops/s, the p50/p90/p99/p999 of
acquire latency, wait and release, and every outcome by kind. The counts add
up: attempts = acquired + not acquired + errors.

Workers are spread over --clients distinct clients (connections). Each
attempt goes to the hot key with probability --contention, else to one of
the other keys at random. A worker holds each lock it gets for --hold, then
releases it, and pauses --think between attempts. Every lock has the lease
--lease (not renewed: a hold longer than the lease is counted as lost) and
waits up to --wait for a held key (0 tries once).

--floor also runs the store's raw commands for the same work, in alternating
rounds so that both see the same load, and prints distlock's figures over
the floor's. The floor tries each key once and never waits: on Redis, SET NX
PX then a compare-and-delete script; on PostgreSQL, pg_try_advisory_lock and
pg_advisory_unlock on one pooled connection; on etcd, a put-if-absent
transaction on a lease and a delete-if-held transaction; on ZooKeeper, an
ephemeral node created and deleted; on mem://, memlock's Acquire and Release
without the client.
` + schemeLines("Floors: ", floor.Schemes()) +
			schemeLines("No floor (bench says why): ", slices.Sorted(maps.Keys(floor.Declined()))) + `
With --count each side makes that many attempts; --duration is the whole
run, shared by both sides, and the deadline of every attempt in it: the
last releases and closing the clients get 0.5s each past it. A run stops
when the store has answered no attempt for 5s.

Live progress goes to stderr once a second when it is a terminal. Ctrl-C
stops the run; the table of what ran is still printed. Exit codes: 0 the run
ended (errors are in the table), 2 bad flags (no store was touched), 69 the
store could not be reached, no attempt got an answer from it, or it stopped
answering.`,
		Example: `  distlock bench --backend redis://127.0.0.1:6379 -c 32 --clients 4 --duration 10s
  distlock bench --backend mem:// --count 100000 --floor
  distlock bench --backend etcd://127.0.0.1:2379 --keys 1 --wait 5s --hold 1ms -n 2000 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBench(cmd, g, cfg) },
	}
	f := cmd.Flags()
	f.IntVarP(&cfg.Workers, "concurrency", "c", cfg.Workers, "workers taking locks at once")
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "distinct clients (connections) the workers are spread over")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "distinct keys, the hot key included")
	f.Float64Var(&cfg.Contention, "contention", 0, "share of attempts on the hot key, 0 to 1")
	f.DurationVarP(&cfg.Duration, "duration", "d", 0, "length of the run (or --count)")
	f.Int64VarP(&cfg.Count, "count", "n", 0, "attempts to make (or --duration)")
	f.DurationVar(&cfg.Lease, "lease", cfg.Lease, "lease of every lock")
	f.DurationVar(&cfg.Wait, "wait", 0, "how long an attempt waits for a held key; 0 tries once")
	f.DurationVar(&cfg.Hold, "hold", 0, "time each lock is held before its release")
	f.DurationVar(&cfg.Think, "think", 0, "pause after each attempt, outside the lock")
	f.StringVar(&cfg.Prefix, "prefix", cfg.Prefix, "prefix of the keys used")
	f.BoolVar(&cfg.Floor, "floor", false, "also run the store's raw commands and print the ratio")
	return cmd
}

// runBench checks the flags, runs the load and prints the report.
func runBench(cmd *cobra.Command, g *globals, cfg bench.Config) error {
	asJSON, err := g.json()
	if err != nil {
		return err
	}
	if cfg.URL, err = g.backendURL(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return exit(ExitUsage, err)
	}
	stderr := cmd.ErrOrStderr()
	cfg.Progress = progressLine(stderr)
	open := func(ctx context.Context, opts ...distlock.ClientOption) (*distlock.Client, error) {
		return g.open(ctx, opts...)
	}
	rep, err := bench.Run(cmd.Context(), cfg, open)
	if cfg.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if rep != nil {
		if werr := writeReport(cmd.OutOrStdout(), rep, asJSON); werr != nil {
			return errors.Join(werr, err)
		}
	}
	var ee *exitError
	switch {
	case err != nil && errors.As(err, &ee):
		return err
	case err != nil: // the flags were good: the store (or the floor's connection to it) failed
		return exit(ExitUnavailable, err)
	}
	return unanswered(rep)
}

// writeReport writes rep as JSON or as text.
func writeReport(w io.Writer, rep *bench.Report, asJSON bool) error {
	var err error
	if asJSON {
		err = writeJSON(w, rep)
	} else {
		err = rep.WriteText(w)
	}
	if err != nil {
		return fmt.Errorf("bench: write the report: %w", err)
	}
	return nil
}

// unanswered returns ExitUnavailable if every attempt of the run failed
// for a reason other than its interruption, or if the run stopped because
// the store stopped answering.
func unanswered(rep *bench.Report) error {
	lock := rep.Sides[0]
	if rep.Stalled {
		return exit(ExitUnavailable, fmt.Errorf("bench: the store answered nothing for %v, so the run stopped after %d attempts; first error: %s", bench.StallLimit, lock.Attempts, firstError(lock)))
	}
	failed := lock.Errors - lock.ErrorsByKind[bench.KindCanceled]
	if failed == 0 || lock.Acquired+lock.NotAcquired > 0 {
		return nil
	}
	return exit(ExitUnavailable, errors.New("bench: no attempt got an answer from the store; first error: "+firstError(lock)))
}

// firstError returns one of s's first errors, the store's if there is one.
func firstError(s bench.Side) string {
	if e, ok := s.FirstErrors[bench.KindStore]; ok {
		return e
	}
	for _, e := range s.FirstErrors {
		return e
	}
	return "none recorded"
}

// progressLine returns a progress printer that rewrites one line of w
// every second, or nil when w is not a terminal.
func progressLine(w io.Writer) func(bench.Progress) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return func(p bench.Progress) {
		fmt.Fprintf(f, "\r\033[K%s  %d attempts  %.0f/s  %d errors", p.Elapsed.Round(time.Second), p.Attempts, p.Rate, p.Errors)
	}
}
