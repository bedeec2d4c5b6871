package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
)

func newListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list [PREFIX]",
		Short: "List the held locks",
		Long: `list shows the locks held in the store whose keys start with PREFIX (all of
them without one), sorted by key: key, owner, business id, fence and the
lease left before each expires without renewal ("-" where the store keeps
no lease). -o json prints an array of the same objects as status.

A store that cannot enumerate its locks says so and list exits 1; 2 on bad
arguments, 69 if the store cannot be reached.`,
		Example: `  distlock list --backend redis://127.0.0.1:6379
  distlock list jobs/ -o json | jq -r '.[].key'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usage("list takes at most one PREFIX, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := strings.Join(args, "")
			return withClient(cmd, g, "list", "", func(ctx context.Context, c *distlock.Client, asJSON bool) error {
				infos, err := c.List(ctx, prefix)
				if errors.Is(err, errors.ErrUnsupported) {
					return exit(ExitError, &opError{op: "list: this store cannot enumerate its locks", err: err})
				}
				if err != nil {
					return storeFailure("list", err)
				}
				views := make([]lockView, len(infos))
				for i, info := range infos {
					views[i] = viewOf(info)
				}
				slices.SortFunc(views, func(a, b lockView) int { return strings.Compare(a.Key, b.Key) })
				if asJSON {
					return writeJSON(cmd.OutOrStdout(), views)
				}
				return writeTable(cmd.OutOrStdout(), prefix, views)
			})
		},
	}
}

// writeTable writes views as a table, or a line saying there are none.
func writeTable(w io.Writer, prefix string, views []lockView) error {
	if len(views) == 0 {
		if prefix == "" {
			_, err := fmt.Fprintln(w, "no locks held")
			return err
		}
		_, err := fmt.Fprintf(w, "no locks held under %q\n", prefix)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOWNER\tBUSINESS ID\tFENCE\tLEASE LEFT")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", v.Key, dash(v.Owner), dash(v.BusinessID), v.Fence, v.leaseLeft())
	}
	return tw.Flush()
}
