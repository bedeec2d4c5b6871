package cli

import (
	"errors"

	"github.com/spf13/cobra"
)

// Commands whose implementation is under way; each moves to its own file.

func pending(use string) *cobra.Command {
	return &cobra.Command{Use: use, Hidden: true, RunE: func(*cobra.Command, []string) error {
		return errors.New(use + ": not built yet")
	}}
}

