package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock/storetool/doctor"
)

// doctorWidth is the column at which text output wraps.
const doctorWidth = 100

// helpWidth is the column at which generated help text wraps.
const helpWidth = 80

// schemeLines lists schemes as URL prefixes after prefix, wrapped for help
// text.
func schemeLines(prefix string, schemes []string) string {
	var b strings.Builder
	wrap(&b, prefix, strings.Join(schemes, ":// ")+"://", helpWidth)
	return b.String()
}

// newDoctorCommand builds `distlock doctor [URL]`.
func newDoctorCommand(g *globals) *cobra.Command {
	opts := doctor.Options{}
	cmd := &cobra.Command{
		Use:   "doctor [URL]",
		Short: "Check a store's configuration for settings that silently break locks",
		Long: `doctor connects to the store a URL names (the argument, else --backend or
$DISTLOCK_BACKEND), reads its configuration without writing anything, and
prints each finding with what it saw, its consequence for locks and the fix,
grouped by severity:

  danger   locks can be lost or doubled, or fences go back, in normal operation
           or after an ordinary restart or failover
  warning  locks can be lost after a rarer fault, a lock operation fails early,
           or a check could not be made
  info     what was seen

Redis (redis://, rediss://, redis-sentinel://, redis-cluster://): eviction
policy, persistence, replicas without min-replicas-to-write, Sentinel and
Cluster topology, clock. etcd: each member's health, quorum and member count,
alarms, clock. PostgreSQL: idle_session_timeout, idle_in_transaction_session_timeout,
statement_timeout and lock_timeout as the URL's role sees them, fsync and
synchronous_commit, a pooler in front, clock. ZooKeeper: the session timeout
granted against the one asked for, the server's bounds, mode. MySQL/MariaDB:
innodb_flush_log_at_trx_commit, wait_timeout, clock. DynamoDB (dynamodb://):
the table and its key schema, its status, billing mode and write capacity,
Time to Live. Redlock (redlock://): each node as a lone Redis server, and
how many nodes answer against the quorum.

` + schemeLines("Checked: ", doctor.Schemes()) +
			schemeLines("Nothing to check (doctor says why): ", slices.Sorted(maps.Keys(doctor.Declined()))) + `
A store with nothing to check gets one info finding saying why (nothing is
sent) and exit 0.

Exit codes: 0 no danger, 3 a danger found, 69 the store could not be reached,
2 a bad URL or flag (nothing was sent).`,
		Example: `  distlock doctor redis://127.0.0.1:6379
  distlock doctor 'postgres://app@db:5432/app?sslmode=disable' --lease 10s
  distlock doctor redis-sentinel://sentinel-1:26379/mymaster -o json
  distlock doctor 'dynamodb://locks?region=eu-west-1'
  DISTLOCK_BACKEND=etcd://10.0.0.1:2379,10.0.0.2:2379 distlock doctor`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runDoctor(cmd, g, args, opts) },
	}
	cmd.Flags().DurationVar(&opts.Lease, "lease", doctor.DefaultLease, "the lease your locks take, which checks compare timeouts with")
	cmd.Flags().DurationVar(&opts.Timeout, "timeout", doctor.DefaultTimeout, "bound on each connection attempt and request")
	return cmd
}

// runDoctor validates the input, runs the checks and prints the report.
func runDoctor(cmd *cobra.Command, g *globals, args []string, opts doctor.Options) error {
	asJSON, err := g.json()
	if err != nil {
		return err
	}
	if opts.Lease <= 0 || opts.Timeout <= 0 {
		return usage("--lease and --timeout must be positive (got %v and %v)", opts.Lease, opts.Timeout)
	}
	u := ""
	if len(args) == 1 {
		u = args[0]
	} else if u, err = g.backendURL(); err != nil {
		return err
	}
	report, err := doctor.Check(cmd.Context(), u, opts)
	switch {
	case errors.Is(err, doctor.ErrInvalidURL):
		return exit(ExitUsage, err)
	case errors.Is(err, doctor.ErrUnreachable):
		return exit(ExitUnavailable, err)
	case err != nil:
		return err
	}
	if asJSON {
		err = writeJSON(cmd.OutOrStdout(), report)
	} else {
		err = writeDoctorText(cmd.OutOrStdout(), report)
	}
	if err != nil {
		return fmt.Errorf("doctor: write the report: %w", err)
	}
	if n := report.Count(doctor.Danger); n > 0 {
		return exit(ExitDanger, fmt.Errorf("doctor: %d danger finding(s) in %s", n, report.URL))
	}
	return nil
}

// writeDoctorText prints the report grouped by severity, most urgent first.
func writeDoctorText(w io.Writer, r *doctor.Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s): %d danger, %d warning, %d info\n", r.URL, r.Store,
		r.Count(doctor.Danger), r.Count(doctor.Warning), r.Count(doctor.Info))
	for _, sev := range doctor.Severities {
		if r.Count(sev) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s\n", strings.ToUpper(sev.String()))
		for _, f := range r.Findings {
			if f.Severity == sev {
				writeFinding(&b, f)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFinding prints one finding: its check and node, then what was seen,
// the consequence and the fix, each wrapped.
func writeFinding(b *strings.Builder, f doctor.Finding) {
	fmt.Fprintf(b, "  %s", f.Check)
	if f.Node != "" {
		fmt.Fprintf(b, " [%s]", f.Node)
	}
	b.WriteByte('\n')
	for _, field := range []struct{ name, text string }{{"seen", f.Seen}, {"consequence", f.Consequence}, {"fix", f.Fix}} {
		if field.text != "" {
			wrap(b, fmt.Sprintf("    %-12s ", field.name+":"), field.text, doctorWidth)
		}
	}
}

// wrap writes text after prefix, breaking lines at width and indenting
// continuation lines to the prefix's width.
func wrap(b *strings.Builder, prefix, text string, width int) {
	indent := strings.Repeat(" ", len(prefix))
	line := prefix
	for i, word := range strings.Fields(text) {
		if i > 0 && len(line)+1+len(word) > width {
			b.WriteString(line + "\n")
			line = indent + word
			continue
		}
		if i > 0 {
			line += " "
		}
		line += word
	}
	b.WriteString(line + "\n")
}
