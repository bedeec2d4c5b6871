// Package cli holds the commands of the distlock binary.
package cli

import (
	"io"

	"github.com/spf13/cobra"
)

// Main runs the command line args with the given standard streams and
// returns the process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := &cobra.Command{Use: "distlock", SilenceUsage: true, SilenceErrors: true}
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	if err := root.Execute(); err != nil {
		return 1
	}
	return 0
}
