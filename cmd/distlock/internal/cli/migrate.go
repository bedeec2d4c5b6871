package cli

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/storetool/migrate"
)

// newMigrateCommand builds `distlock migrate [URL]`.
func newMigrateCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate [URL]",
		Short: "Create the tables (or bucket) a store's backend needs",
		Long: `migrate creates, where they are missing, the tables (and sequences) of the
store a URL names (the argument, else --backend or $DISTLOCK_BACKEND), or
its NATS Key-Value bucket, and leaves what exists as it is: running it
again changes nothing. Run it once at deployment, with a user that may
create them.

The lease table (mysql+table://), DynamoDB's table (dynamodb://) and the
NATS bucket (nats://) must be made this way (or with the backend's
Migrate, dynamolock.CreateTable, natslock.CreateBucket): until then every
command on the store exits 78 and says so. PostgreSQL
(postgres://) and MySQL named locks (mysql://) create theirs on first use,
if the locking user may; migrate makes them ahead of it.

` + schemeLines("Has a schema: ", migrate.Schemes()) +
			schemeLines("Keeps none (migrate says so and exits 0): ", slices.Sorted(maps.Keys(migrate.Declined()))) + `
Exit codes: 0 the schema exists now (or the store keeps none), 69 the store
could not be reached or refused, 2 a bad URL or flag (nothing was sent).`,
		Example: `  distlock migrate 'mysql+table://app:secret@db:3306/app'
  distlock migrate 'dynamodb://locks?region=eu-west-1' -o json
  DISTLOCK_BACKEND=postgres://admin@db/app distlock migrate`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := g.json()
			if err != nil {
				return err
			}
			u := ""
			if len(args) == 1 {
				u = args[0]
			} else if u, err = g.backendURL(); err != nil {
				return err
			}
			res, err := migrate.Run(cmd.Context(), u)
			switch {
			case errors.Is(err, migrate.ErrInvalidURL), errors.Is(err, distlock.ErrInvalidOption):
				return exit(ExitUsage, err)
			case err != nil:
				return exit(ExitUnavailable, err)
			case asJSON:
				return writeJSON(cmd.OutOrStdout(), res)
			case res.None != "":
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: nothing to do: %s\n", res.URL, res.None)
			default:
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s: ready: %s (created where missing)\n", res.URL, res.Schema)
			}
			return err
		},
	}
}
