package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
)

func newStatusCommand(g *globals) *cobra.Command {
	var exitStatus bool
	c := &cobra.Command{
		Use:   "status KEY",
		Short: "Show who holds a lock",
		Long: `status asks the store about KEY: whether it is held, by which owner, for
which business id, with which fence, and how long its lease has left before
it expires without renewal. A free key shows the fence of its last grant if
the store still knows it.

No store records when a lock was taken, so status cannot say how long it has
been held. The lease left is what the store keeps for the hold ("-" if it
reported none); on PostgreSQL, MySQL and ZooKeeper the hold also ends with
its holder's session, whatever the lease left says.

It exits 0 whether the key is held or free (read "held" from -o json), or
with --exit-status 0 if it is held and 3 if it is free (as the status of an
LSB init script); 2 on bad arguments, 69 if the store cannot be reached.`,
		Example: `  distlock status --backend redis://127.0.0.1:6379 nightly-report
  distlock status nightly-report -o json | jq .held
  if distlock status --exit-status nightly-report >/dev/null; then echo "running elsewhere"; fi`,
		Args: oneKey("status"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withClient(cmd, g, "status", args[0], func(ctx context.Context, c *distlock.Client, asJSON bool) error {
				info, err := c.Inspect(ctx, args[0])
				if err != nil {
					return storeFailure("status", err)
				}
				v := viewOf(info)
				if asJSON {
					err = writeJSON(cmd.OutOrStdout(), v)
				} else {
					err = v.writeText(cmd.OutOrStdout())
				}
				if err == nil && exitStatus && !v.Held {
					return quietExit(ExitFree)
				}
				return err
			})
		},
	}
	c.Flags().BoolVar(&exitStatus, "exit-status", false, "exit 0 if the key is held, 3 if it is free")
	return c
}

// oneKey is the Args check of a command that takes exactly one key.
func oneKey(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usage("%s takes one KEY, got %d arguments", name, len(args))
		}
		return nil
	}
}

// withClient checks -o and key (unless empty) for the command op, opens the
// store and calls fn with a client that it closes afterwards.
func withClient(cmd *cobra.Command, g *globals, op, key string, fn func(context.Context, *distlock.Client, bool) error) error {
	asJSON, err := g.json()
	if err != nil {
		return err
	}
	if key != "" {
		if err := distlock.ValidateKey(key); err != nil {
			return exit(ExitUsage, &opError{op: op, err: err})
		}
	}
	ctx := cmd.Context()
	c, err := openClient(ctx, g, op)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c, asJSON)
}

// openClient is g.open for the command op: its errors name op and say
// "distlock:" once.
func openClient(ctx context.Context, g *globals, op string, opts ...distlock.ClientOption) (*distlock.Client, error) {
	c, err := g.open(ctx, opts...)
	var ee *exitError
	if errors.As(err, &ee) {
		return nil, exit(ee.code, &opError{op: op, err: ee.err})
	}
	return c, err
}

// opError is an error of the command op. Its cause may come from the
// library, which starts its messages with "distlock:" as Main does, so that
// prefix is dropped from the text (the cause is still wrapped).
type opError struct {
	op  string
	err error
}

func (e *opError) Error() string {
	return e.op + ": " + strings.TrimPrefix(e.err.Error(), "distlock: ")
}
func (e *opError) Unwrap() error { return e.err }

// storeFailure gives a failed store call of command op its exit code: a
// backend that cannot do it is ExitError, bad input ExitUsage, anything
// else a store that could not answer.
func storeFailure(op string, err error) error {
	err = &opError{op: op, err: err}
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		return exit(ExitError, err)
	case errors.Is(err, distlock.ErrInvalidKey), errors.Is(err, distlock.ErrInvalidOption):
		return exit(ExitUsage, err)
	}
	return exit(ExitUnavailable, err)
}

// lockView is how status, list and release show a lock, in text and JSON.
type lockView struct {
	Key        string            `json:"key"`
	Held       bool              `json:"held"`
	Owner      string            `json:"owner,omitempty"`
	BusinessID string            `json:"business_id,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Fence is the holder's fence, or the last grant's if the key is free;
	// absent for a key the store knows no grant of.
	Fence uint64 `json:"fence,omitempty"`
	// LeaseLeftMS is the store's time to live of the hold, in milliseconds;
	// absent when the key is free or the store keeps no lease.
	LeaseLeftMS int64 `json:"lease_left_ms,omitempty"`
}

// viewOf returns the view of info.
func viewOf(info distlock.Info) lockView {
	return lockView{
		Key: info.Key, Held: info.Held, Fence: info.Fence,
		Owner: info.Meta.Owner, BusinessID: info.Meta.BusinessID, Labels: info.Meta.Labels,
		LeaseLeftMS: info.TTL.Milliseconds(),
	}
}

// owner returns the owner, or "an unnamed owner".
func (v lockView) owner() string {
	if v.Owner == "" {
		return "an unnamed owner"
	}
	return v.Owner
}

// leaseLeft returns the lease left, to the millisecond, or "-".
func (v lockView) leaseLeft() string {
	if v.LeaseLeftMS <= 0 {
		return "-"
	}
	return (time.Duration(v.LeaseLeftMS) * time.Millisecond).String()
}

// labels returns the labels as sorted k=v pairs.
func (v lockView) labels() string {
	pairs := make([]string, 0, len(v.Labels))
	for _, k := range slices.Sorted(maps.Keys(v.Labels)) {
		pairs = append(pairs, k+"="+v.Labels[k])
	}
	return strings.Join(pairs, ", ")
}

// writeText writes the view as aligned "field: value" lines.
func (v lockView) writeText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\n", v.Key)
	if !v.Held {
		fmt.Fprintf(tw, "held:\tno\n")
		if v.Fence > 0 {
			fmt.Fprintf(tw, "last fence:\t%d\n", v.Fence)
		}
		return tw.Flush()
	}
	fmt.Fprintf(tw, "held:\tyes\n")
	fmt.Fprintf(tw, "owner:\t%s\n", dash(v.Owner))
	fmt.Fprintf(tw, "business id:\t%s\n", dash(v.BusinessID))
	if len(v.Labels) > 0 {
		fmt.Fprintf(tw, "labels:\t%s\n", v.labels())
	}
	fmt.Fprintf(tw, "fence:\t%d\n", v.Fence)
	fmt.Fprintf(tw, "lease left:\t%s\n", v.leaseLeft())
	return tw.Flush()
}

// dash returns s, or "-" if it is empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
