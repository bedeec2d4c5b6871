// Package cli holds the commands of the distlock binary. Each command parses
// its flags and calls the library; the exit codes below are its contract
// with scripts (docs/cli.md lists them).
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/storetool/migrate"
)

// Exit codes. A command run by `distlock run` exits with its own code,
// which may be any of these too; use --skip-ok where that matters.
const (
	ExitOK          = 0
	ExitError       = 1  // a failure not listed below
	ExitUsage       = 2  // bad flags or arguments; nothing was sent to a store
	ExitDanger      = 3  // doctor found a setting that breaks locks
	ExitFree        = 3  // status --exit-status: the key is free (LSB's "not running")
	ExitUnavailable = 69 // the store could not be reached
	ExitNotAcquired = 75 // the lock is held by someone else (run, release)
	ExitLockLost    = 76 // the lock was lost while the command ran
	// ExitNoSchema: the store lacks a table its backend needs (the error
	// matches distlock.ErrNoSchema, whatever command met it); the message
	// gives the distlock migrate command that creates it.
	ExitNoSchema = 78
)

// exitError carries an exit code to Main, with the one line to print.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }

// exit returns err with the exit code code.
func exit(code int, err error) error { return &exitError{code: code, err: err} }

// quietExit is the exit code code, with nothing printed: an answer, not a
// failure.
func quietExit(code int) error { return &exitError{code: code} }

// usage returns a usage error: exit code ExitUsage.
func usage(format string, args ...any) error {
	return exit(ExitUsage, fmt.Errorf(format, args...))
}

// globals are the flags every command shares.
type globals struct {
	backend string // --backend, else $DISTLOCK_BACKEND
	output  string // -o: text or json
	// watchLoss has open follow the lock service's event stream, so that a
	// lock taken through the service learns of its loss at once (run).
	watchLoss bool
}

// backendURL returns the store URL from --backend or $DISTLOCK_BACKEND.
func (g *globals) backendURL() (string, error) {
	u := g.backend
	if u == "" {
		u = os.Getenv("DISTLOCK_BACKEND")
	}
	if u == "" {
		return "", usage("no store: give --backend URL or set DISTLOCK_BACKEND (e.g. redis://127.0.0.1:6379, etcd://127.0.0.1:2379)")
	}
	return u, nil
}

// open returns a client over the store the flags name. A store that cannot
// be reached is ExitUnavailable; a URL that is wrong, ExitUsage.
func (g *globals) open(ctx context.Context, opts ...distlock.ClientOption) (*distlock.Client, error) {
	u, err := g.backendURL()
	if err != nil {
		return nil, err
	}
	if g.watchLoss {
		u = withLossWatch(u)
	}
	c, err := distlock.Open(ctx, u, opts...)
	switch {
	case errors.Is(err, distlock.ErrInvalidOption) || errors.Is(err, distlock.ErrInvalidKey):
		return nil, exit(ExitUsage, err)
	case err != nil && isURLError(err):
		return nil, exit(ExitUsage, err)
	case err != nil:
		return nil, exit(ExitUnavailable, err)
	}
	return c, nil
}

// withLossWatch returns the store URL u with watch_loss=true if it names
// the lock service and does not set watch_loss itself.
func withLossWatch(u string) string {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "distlock" && p.Scheme != "distlocks") {
		return u
	}
	q := p.Query()
	if q.Has("watch_loss") {
		return u
	}
	q.Set("watch_loss", "true")
	p.RawQuery = q.Encode()
	return p.String()
}

// isURLError reports whether Open failed on the URL itself (no such scheme,
// not a URL) rather than on the store.
func isURLError(err error) bool {
	var ke *distlock.KeyError
	if errors.As(err, &ke) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "forgotten import") || strings.Contains(msg, "not a URL")
}

// json reports whether -o json was asked for; any other value than text or
// json is a usage error.
func (g *globals) json() (bool, error) {
	switch g.output {
	case "", "text":
		return false, nil
	case "json":
		return true, nil
	}
	return false, usage("-o %q: want text or json", g.output)
}

// writeJSON writes v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newRoot builds the command tree, whose shared flags go to g.
func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "distlock",
		Short: "Distributed locks from the command line",
		Long: `distlock runs a command under a distributed lock (the cron-on-every-replica
problem), shows and frees locks, checks a store for settings that silently
break locks, creates the tables a store needs, and load-tests a backend.

The store is a URL, as for distlock.Open: --backend or $DISTLOCK_BACKEND.`,
		Example: `  distlock run --backend redis://127.0.0.1:6379 --key nightly-report -- ./report.sh
  export DISTLOCK_BACKEND=etcd://127.0.0.1:2379
  distlock list jobs/ -o json
  distlock doctor redis://127.0.0.1:6379`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&g.backend, "backend", "", "store URL (default $DISTLOCK_BACKEND)")
	root.PersistentFlags().StringVarP(&g.output, "output", "o", "text", "output format: text or json")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exit(ExitUsage, err) })
	for _, c := range []func(*globals) *cobra.Command{newRunCommand, newHoldCommand, newStatusCommand, newListCommand, newReleaseCommand, newDoctorCommand, newMigrateCommand, newBenchCommand, newServeCommand} {
		root.AddCommand(c(g))
	}
	addCompletions(root, g) // cobra's own completion command prints the scripts
	return root
}

// Main runs the command line args with the given standard streams and
// returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	quietDrivers()
	g := &globals{}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, distlock.ErrNoSchema) {
		err = noSchema(g, err)
	}
	var quiet *exitError
	if errors.As(err, &quiet) && quiet.err == nil {
		return quiet.code
	}
	fmt.Fprintln(stderr, "distlock:", strings.TrimPrefix(err.Error(), "distlock: "))
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if isUnknownCommand(err) {
		return ExitUsage
	}
	return ExitError
}

// noSchema returns err, a command's failure on a store without the schema
// its backend needs, with ExitNoSchema and the command that creates it.
func noSchema(g *globals, err error) error {
	fix := "distlock migrate URL"
	if u, uerr := g.backendURL(); uerr == nil {
		fix = migrate.Command(u)
	}
	return exit(ExitNoSchema, fmt.Errorf("%w; create it with: %s", err, fix))
}

// isUnknownCommand reports cobra's errors for an unknown command or bad
// arguments, which it does not route through the flag error func.
func isUnknownCommand(err error) bool {
	for _, s := range []string{"unknown command", "accepts ", "requires at least", "requires at most", "unknown flag", "unknown shorthand flag"} {
		if strings.Contains(err.Error(), s) {
			return true
		}
	}
	return false
}
