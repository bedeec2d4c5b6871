package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/distlock/distlock"
)

// releaseFlags are the flags of distlock release.
type releaseFlags struct {
	force   bool
	request bool
	yes     bool
	reason  string
}

// requestResult is what release --request prints with -o json.
type requestResult struct {
	Asked  lockView `json:"asked"`
	By     string   `json:"by"`
	Reason string   `json:"reason"`
}

// releaseResult is what release --force prints with -o json.
type releaseResult struct {
	Released lockView `json:"released"`
	By       string   `json:"by"`
	Reason   string   `json:"reason"`
}

func newReleaseCommand(g *globals) *cobra.Command {
	f := &releaseFlags{}
	c := &cobra.Command{
		Use:   "release (--request | --force) KEY --reason TEXT",
		Short: "Ask a lock's holder to release it, or free it whoever holds it",
		Long: `release --request asks the holder of KEY to release it: the holder is told
at once, with the reason (Lock.ReleaseRequested in Go; distlock run passes it
on as the signal --on-release-request names), keeps the lock, and may finish
its unit of work first. The lock itself does not change. The reason is sent as
USER@HOST: TEXT. Redis, etcd and the lock service can tell a holder; other
stores say they cannot.

release --force frees KEY whoever holds it, for a job known dead or stuck
while its lock keeps being renewed, or one that did not answer a request.
A holder releases its own lock with its token; freeing a lock by key is only
ever a force release, so --force or --request is required.

On a terminal it shows the holder and asks for confirmation; elsewhere it
needs --yes. The reason is recorded as USER@HOST: TEXT and printed with
what was ended (owner, business id, fence, lease left).

The holder is not told at once: it learns at its next renewal, or when its
validity runs out, and may write meanwhile. Protect the resource with
fences. Stores that cannot free a lock they did not grant say why (a
PostgreSQL advisory lock can only be freed by ending the session holding
it: open the store with terminate_on_force_release=true to allow that).

Exit codes: 0 released (or asked); 1 the key was not held, confirmation was
declined, or the store cannot force-release or tell a holder; 2 bad
arguments or no confirmation possible (nothing was sent to the store); 69
store unreachable.`,
		Example: `  distlock release --request nightly-report --reason "deploy at 02:00"
  distlock release --force nightly-report --reason "report job hung, pid 4242 killed"
  distlock release --force order:42 --reason "INC-1234" --yes -o json`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(cmd, args); err != nil {
				return err
			}
			if f.request {
				return withClient(cmd, g, "release --request", args[0], func(ctx context.Context, c *distlock.Client, asJSON bool) error {
					return f.ask(ctx, cmd, c, args[0], asJSON)
				})
			}
			return withClient(cmd, g, "release --force", args[0], func(ctx context.Context, c *distlock.Client, asJSON bool) error {
				return f.release(ctx, cmd, c, args[0], asJSON)
			})
		},
	}
	c.Flags().BoolVar(&f.request, "request", false, "ask the holder to release the lock; it is told at once and decides")
	c.Flags().BoolVar(&f.force, "force", false, "free the lock whoever holds it")
	c.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation")
	c.Flags().StringVar(&f.reason, "reason", "", "why the lock is freed, recorded with who did it (required)")
	return c
}

// validate checks the flags and arguments before any store is opened.
func (f *releaseFlags) validate(cmd *cobra.Command, args []string) error {
	switch {
	case f.request && f.force:
		return usage("release: --request asks the holder, --force frees the lock; give one")
	case f.request && len(args) != 1:
		return usage("release --request takes one KEY, got %d arguments", len(args))
	case f.request && strings.TrimSpace(f.reason) == "":
		return usage("release --request: --reason is required: say why the holder should let go")
	case f.request && len(operator())+2+len(f.reason) > distlock.MaxRequestReason:
		return usage("release --request: --reason is too long: at most %d bytes with who asks (%s: )", distlock.MaxRequestReason, operator())
	case f.request:
		return nil
	case !f.force:
		return usage("release: a lock is released by its holder, with its token; ask the holder with distlock release --request KEY --reason TEXT, or free it with distlock release --force KEY --reason TEXT")
	case len(args) != 1:
		return usage("release --force takes one KEY, got %d arguments", len(args))
	case strings.TrimSpace(f.reason) == "":
		return usage("release --force: --reason is required: say why the lock is freed; it is recorded with who freed it")
	case !f.yes && !isTerminal(cmd.InOrStdin()):
		return usage("release --force: stdin is not a terminal to confirm on; add --yes to free %q without confirmation", args[0])
	}
	return nil
}

// release asks for confirmation unless --yes, frees key and prints what
// it ended.
func (f *releaseFlags) release(ctx context.Context, cmd *cobra.Command, c *distlock.Client, key string, asJSON bool) error {
	if !f.yes {
		if err := confirm(ctx, cmd, c, key); err != nil {
			return err
		}
	}
	by := operator()
	info, err := c.ForceRelease(ctx, key, by+": "+f.reason)
	switch {
	case errors.Is(err, distlock.ErrNotHeld):
		return exit(ExitError, fmt.Errorf("release --force: %q is not held; nothing was released", key))
	case errors.Is(err, errors.ErrUnsupported):
		return exit(ExitError, &opError{op: "release --force: this store cannot free a lock it did not grant", err: err})
	case err != nil:
		return storeFailure("release --force", err)
	}
	info.Key = key
	v := viewOf(info)
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), releaseResult{Released: v, By: by, Reason: f.reason})
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "released %q held by %s (business id %s, fence %d, lease left %s); by %s: %s\n",
		key, v.owner(), dash(v.BusinessID), v.Fence, v.leaseLeft(), by, f.reason)
	return err
}

// ask asks key's holder to release it and prints whom it asked.
func (f *releaseFlags) ask(ctx context.Context, cmd *cobra.Command, c *distlock.Client, key string, asJSON bool) error {
	by := operator()
	info, err := c.RequestRelease(ctx, key, by+": "+f.reason)
	switch {
	case errors.Is(err, distlock.ErrNotHeld):
		return exit(ExitError, fmt.Errorf("release --request: %q is not held; nobody was asked", key))
	case errors.Is(err, errors.ErrUnsupported):
		return exit(ExitError, &opError{op: "release --request: this store cannot tell a holder; release --force frees the lock", err: err})
	case err != nil:
		return storeFailure("release --request", err)
	}
	info.Key = key
	v := viewOf(info)
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), requestResult{Asked: v, By: by, Reason: f.reason})
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "asked the holder of %q to release it: %s (business id %s, fence %d, lease left %s); by %s: %s\n",
		key, v.owner(), dash(v.BusinessID), v.Fence, v.leaseLeft(), by, f.reason)
	return err
}

// confirm shows key's holder on stderr and asks whether to free it.
// A free key, a declined answer or no answer is an error.
func confirm(ctx context.Context, cmd *cobra.Command, c *distlock.Client, key string) error {
	info, err := c.Inspect(ctx, key)
	if err != nil {
		return storeFailure("release --force", err)
	}
	if !info.Held {
		return exit(ExitError, fmt.Errorf("release --force: %q is not held; nothing was released", key))
	}
	v := viewOf(info)
	fmt.Fprintf(cmd.ErrOrStderr(), "%q is held by %s (business id %s, fence %d, lease left %s).\n"+
		"Its holder may still write until it learns of the release, at once or at its next renewal.\nFree it? [y/N] ",
		key, v.owner(), dash(v.BusinessID), v.Fence, v.leaseLeft())
	if !answeredYes(ctx, cmd.InOrStdin()) {
		return exit(ExitError, fmt.Errorf("release --force: not confirmed; %q is still held", key))
	}
	return nil
}

// answeredYes reads one line from in and reports whether it says yes.
// An interrupt (ctx ending) is no; the read is then left to the process's
// exit, as a read of a terminal cannot be cancelled.
func answeredYes(ctx context.Context, in io.Reader) bool {
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(in).ReadString('\n')
		answer <- line
	}()
	select {
	case line := <-answer:
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return true
		}
	case <-ctx.Done():
	}
	return false
}

// isTerminal reports whether r is a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// operator names who runs this command, as USER@HOST, for owners and the
// force-release record.
func operator() string {
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return dash(name) + "@" + host
}
