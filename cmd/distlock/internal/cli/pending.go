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

func newRunCommand(*globals) *cobra.Command     { return pending("run") }
func newStatusCommand(*globals) *cobra.Command  { return pending("status") }
func newListCommand(*globals) *cobra.Command    { return pending("list") }
func newReleaseCommand(*globals) *cobra.Command { return pending("release") }
func newDoctorCommand(*globals) *cobra.Command  { return pending("doctor") }
func newBenchCommand(*globals) *cobra.Command   { return pending("bench") }
