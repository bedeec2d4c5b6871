package cli

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/idem"
)

// Key candidates come from the store, listed within completionTimeout and
// at most completionLimit of them: a shell waits for them at every TAB.
const (
	completionTimeout = 2 * time.Second
	completionLimit   = 200
)

// releaseRequestSignals are the candidates of run --on-release-request:
// none and the signals a command usually handles (any other but KILL and
// STOP is accepted too).
var releaseRequestSignals = []string{"none", "TERM", "INT", "HUP", "QUIT", "USR1", "USR2"}

// oncePerValues are the candidates of run --once-per: common periods and
// the cron package's descriptors (any duration or schedule is accepted).
var oncePerValues = []string{"1h", "24h", "168h", "@hourly", "@daily", "@weekly", "@monthly"}

// addCompletions teaches the shell completion of the commands under root
// the values of their flags and arguments: -o, --backend and the URL of
// doctor and migrate, --on-release-request, run's --once-per and
// --records, and every lock key (the KEY of
// status, release and hold, the PREFIX of list, --key of run and hold),
// which are the keys held in the store of --backend or $DISTLOCK_BACKEND.
func addCompletions(root *cobra.Command, g *globals) {
	must(root.RegisterFlagCompletionFunc("output", fixed("text", "json")))
	must(root.RegisterFlagCompletionFunc("backend", completeScheme))
	keys := func(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return heldKeys(cmd.Context(), g, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	// firstArg completes a command's one argument; noneIf names a flag
	// that stands for it (hold's --key).
	firstArg := func(noneIf string) cobra.CompletionFunc {
		return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 || (noneIf != "" && cmd.Flags().Changed(noneIf)) {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return keys(cmd, args, toComplete)
		}
	}
	for _, c := range root.Commands() {
		switch c.Name() {
		case "status", "release", "list":
			c.ValidArgsFunction = firstArg("")
		case "hold":
			c.ValidArgsFunction = firstArg("key")
		case "doctor", "migrate":
			c.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
				if len(args) > 0 {
					return nil, cobra.ShellCompDirectiveNoFileComp
				}
				return completeScheme(cmd, args, toComplete)
			}
		}
		if c.Flags().Lookup("key") != nil {
			must(c.RegisterFlagCompletionFunc("key", keys))
		}
		if c.Flags().Lookup("on-release-request") != nil {
			must(c.RegisterFlagCompletionFunc("on-release-request", fixed(releaseRequestSignals...)))
		}
		if c.Flags().Lookup("once-per") != nil {
			must(c.RegisterFlagCompletionFunc("once-per", fixed(oncePerValues...)))
			must(c.RegisterFlagCompletionFunc("records", completeRecordScheme))
		}
	}
}

// must panics on a completion registered twice or for a flag that does
// not exist: a mistake in the command tree, found by any test.
func must(err error) {
	if err != nil {
		panic("distlock: completion: " + err.Error())
	}
}

// fixed completes a flag from values, those that start with what is typed.
func fixed(values ...string) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		return withPrefix(values, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeScheme completes a store URL's scheme, as "redis://", without a
// space after it: the address follows.
func completeScheme(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return urlStarts(distlock.Schemes(), toComplete)
}

// completeRecordScheme completes --records: the schemes of the stores that
// keep --once-per's records.
func completeRecordScheme(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return urlStarts(idem.URLSchemes(), toComplete)
}

// urlStarts returns "scheme://" for the schemes that start with what is
// typed, to be completed with no space after.
func urlStarts(schemes []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	starts := make([]string, len(schemes))
	for i, s := range schemes {
		starts[i] = s + "://"
	}
	return withPrefix(starts, toComplete), cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

// withPrefix returns the values that start with prefix.
func withPrefix(values []string, prefix string) []string {
	var out []string
	for _, v := range values {
		if strings.HasPrefix(v, prefix) {
			out = append(out, v)
		}
	}
	return out
}

// heldKeys returns the keys held in the store the flags name that start
// with prefix: at most completionLimit, in key order, listed within
// completionTimeout. A store that is not given, cannot be opened, reached
// or listed gives none, silently: a completion prints no errors.
func heldKeys(ctx context.Context, g *globals, prefix string) []string {
	u, err := g.backendURL()
	if err != nil {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	c, err := distlock.Open(ctx, u)
	if err != nil {
		return nil
	}
	defer c.Close()
	infos, err := c.ListPage(ctx, prefix, "", completionLimit)
	if err != nil {
		return nil
	}
	keys := make([]string, 0, len(infos))
	for _, info := range infos {
		if info.Held && strings.HasPrefix(info.Key, prefix) {
			keys = append(keys, info.Key)
		}
	}
	return keys
}
