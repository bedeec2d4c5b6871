// Command distlock runs a command under a distributed lock, operates locks
// in any store distlock supports, checks a store for settings that silently
// break locks, and load-tests a backend. See docs/cli.md.
package main

import (
	"os"

	"github.com/distlock/distlock/cmd/distlock/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
