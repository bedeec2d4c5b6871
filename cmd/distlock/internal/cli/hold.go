package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/distlock/distlock"
)

// holdSignals end a hold: distlock releases the lock and exits 0. While it
// waits for the lock, they end the wait (exit 128+N).
var holdSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// holdFlags are the flags of distlock hold.
type holdFlags struct {
	lockFlags
}

func newHoldCommand(g *globals) *cobra.Command {
	f := &holdFlags{}
	c := &cobra.Command{
		Use:   "hold KEY [flags]",
		Short: "Take a lock and keep it until a signal",
		Long: `hold takes the lock KEY (the argument, or --key), prints one line on
stdout, "FENCE KEY", then closes stdout and keeps the lock, renewing it
every third of its lease, until it gets SIGTERM, SIGINT or SIGHUP: it then
releases the lock and exits 0. A shell script brackets work with it, as
with etcdctl lock NAME: start hold in the background with its stdout on a
pipe (a coproc, or a fifo), read the line, which says the lock is held and
gives its fence, do the work, then kill hold and wait for it. Start hold
so that the pid the script kills is distlock's own: in a bash coproc,
exec distlock; in sh, not inside a list (a && distlock hold ... & runs a
subshell).

The line comes only once the lock is held; if hold exits without taking
it, stdout ends with no line, so a script's read fails and wait gives the
reason as the exit code. The fence comes first so that read -r fence key
reads any key whole. With -o json the line is one JSON object instead:
{"key", "fence", "owner", "lease_ms", and "business_id" if given}.

If the lock is lost while held (force-released, the store refused a
renewal, could not be reached before the lease ran out, or --max-hold was
reached), hold says why on stderr and exits 76: a script learns it from
wait, or sooner by checking that hold still runs (kill -0) between steps.
A forced release is seen at once on Redis, etcd, ZooKeeper and the lock
service, elsewhere at the next renewal. Protect what the work writes with
the fence: a lock can be lost before its holder hears of it.

A request to release the lock (distlock release --request) is said on
stderr; hold keeps the lock until its signal. If distlock is killed with
SIGKILL the lock expires within its lease.

Exit codes: 0 released after a signal; 1 stdout could not be written (the
lock was released); 2 bad flags (nothing was sent to the store); 69 store
unreachable; 75 held elsewhere after --wait; 76 lock lost while held;
128+N interrupted by signal N while waiting for the lock.`,
		Example: `  # bash: hold in a coproc (exec, so that HOLD_PID is distlock's), read its
  # line, do the work, then release the lock
  coproc HOLD { exec distlock hold deploy --wait 5m; }
  pid=$HOLD_PID
  read -r fence key <&"${HOLD[0]}" || { wait "$pid"; exit; }   # no line: exit with hold's code
  ./deploy.sh --fence "$fence"
  kill "$pid"; wait "$pid"

  # POSIX sh: the same through a fifo
  dir=$(mktemp -d) && mkfifo "$dir/hold"
  distlock hold --key deploy --wait forever >"$dir/hold" &
  pid=$!
  read -r fence key <"$dir/hold" || { wait "$pid"; exit; }

  distlock hold nightly -o json --lease 10s --max-hold 1h`,
		RunE: func(cmd *cobra.Command, args []string) error {
			asJSON, err := f.validate(g, args)
			if err != nil {
				return err
			}
			return f.hold(cmd, g, asJSON)
		},
	}
	f.add(c, "while distlock holds it", "exit 76")
	c.Flags().Lookup("key").Usage = "lock key, instead of the argument KEY"
	return c
}

// validate takes the key from the argument or --key and checks the flags.
// It touches no store.
func (f *holdFlags) validate(g *globals, args []string) (asJSON bool, err error) {
	if asJSON, err = g.json(); err != nil {
		return false, err
	}
	switch {
	case len(args) > 1:
		return false, usage("hold takes one KEY, got %d arguments", len(args))
	case len(args) == 1 && f.key != "":
		return false, usage("hold: give the key once: as the argument KEY or as --key")
	case len(args) == 1:
		f.key = args[0]
	case f.key == "":
		return false, usage("hold: no key: want distlock hold KEY or --key KEY")
	}
	return asJSON, f.lockFlags.validate("hold")
}

// hold takes the lock, says so on stdout and keeps it until a signal or
// its loss, then releases it.
func (f *holdFlags) hold(cmd *cobra.Command, g *globals, asJSON bool) error {
	// A reader of stdout that is gone must not kill distlock with SIGPIPE
	// while it holds the lock: the write fails instead, and the lock is
	// released.
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, len(holdSignals))
	signal.Notify(sigs, holdSignals...)
	defer signal.Stop(sigs)
	ctx, stop := signal.NotifyContext(cmd.Context(), holdSignals...) // ends a wait for the lock
	defer stop()
	losses := &lossRecorder{}
	// hold keeps one lock: over the lock service, one event stream tells it
	// of the lock's loss at once.
	g.watchLoss = true
	client, err := openClient(ctx, g, "hold", distlock.WithObserver(losses))
	if err != nil {
		return err
	}
	var giveUp time.Time // set once the lock is known lost: when to stop waiting for the store
	defer func() { closeClient(client, giveUp) }()
	l, err := client.Lock(ctx, f.key, f.lockOptions()...)
	if err != nil {
		return f.notAcquired(ctx, client, err, sigs)
	}
	if ctx.Err() != nil { // a signal came as the lock was granted
		releaseLock(cmd, l, time.Now().Add(distlock.ReleaseBudget))
		return interrupted("hold", sigs, "as the lock was granted")
	}
	stop()
	if err := f.announce(cmd.OutOrStdout(), l, asJSON); err != nil {
		releaseLock(cmd, l, time.Now().Add(distlock.ReleaseBudget))
		return fmt.Errorf("hold: write the held line: %w; the lock was released", err)
	}
	giveUp, err = keep(cmd, l, sigs, losses)
	return err
}

// notAcquired turns a failed Lock into the exit status: held elsewhere, a
// wait outlasted by a failing store, interrupted, bad options, or a store
// failure.
func (f *holdFlags) notAcquired(ctx context.Context, client *distlock.Client, err error, sigs <-chan os.Signal) error {
	switch {
	case ctx.Err() != nil:
		return interrupted("hold", sigs, "while waiting for the lock")
	case errors.Is(err, distlock.ErrNotAcquired) && f.outlasted(err) != "":
		return exit(ExitUnavailable, fmt.Errorf("hold: %s", f.outlasted(err)))
	case errors.Is(err, distlock.ErrNotAcquired):
		return exit(ExitNotAcquired, fmt.Errorf("hold: %q is held by %s", f.key, holder(ctx, client, f.key)))
	case errors.Is(err, distlock.ErrInvalidOption), errors.Is(err, distlock.ErrInvalidKey):
		return exit(ExitUsage, &opError{op: "hold", err: err})
	}
	return exit(ExitUnavailable, &opError{op: "hold", err: err})
}

// heldLine is the line of hold -o json.
type heldLine struct {
	Key        string `json:"key"`
	Fence      uint64 `json:"fence"`
	Owner      string `json:"owner"`
	BusinessID string `json:"business_id,omitempty"`
	LeaseMS    int64  `json:"lease_ms"`
}

// announce writes the held line, "FENCE KEY" or one JSON object, to w and
// then points w, if it is a file, at /dev/null: a script reading hold's
// stdout sees its end right after the line, and nothing hold does later
// can write there.
func (f *holdFlags) announce(w io.Writer, l *distlock.Lock, asJSON bool) error {
	line := fmt.Appendf(nil, "%d %s\n", l.Fence(), l.Key())
	if asJSON {
		b, err := json.Marshal(heldLine{Key: l.Key(), Fence: l.Fence(), Owner: f.ownerName(), BusinessID: f.businessID, LeaseMS: f.lease.Milliseconds()})
		if err != nil {
			return err
		}
		line = append(b, '\n')
	}
	if _, err := w.Write(line); err != nil {
		return err
	}
	if out, ok := w.(*os.File); ok {
		null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer null.Close()
		return unix.Dup2(int(null.Fd()), int(out.Fd()))
	}
	return nil
}

// keep holds l, renewed by the watchdog, until a signal or the end of cmd's
// context (release, exit 0) or the lock's loss (exit 76). A lost lock is
// released best effort, within lostReleaseBound, and giveUp is then when
// the wait for the store ends.
func keep(cmd *cobra.Command, l *distlock.Lock, sigs <-chan os.Signal, losses *lossRecorder) (giveUp time.Time, err error) {
	stderr := cmd.ErrOrStderr()
	asked := l.ReleaseRequested()
	for {
		select {
		case <-sigs:
		case <-cmd.Context().Done():
		case <-asked:
			asked = nil
			fmt.Fprintf(stderr, "distlock: hold: a release of lock %q was requested: %s; hold keeps it until it gets SIGTERM, SIGINT or SIGHUP\n",
				l.Key(), l.ReleaseReason())
			continue
		case <-l.Done():
		}
		break
	}
	select {
	case <-l.Done(): // lost, maybe as the signal came: say so
	default:
		releaseLock(cmd, l, time.Now().Add(distlock.ReleaseBudget))
		return time.Time{}, nil
	}
	giveUp = time.Now().Add(lostReleaseBound)
	if losses.storeMayHold() {
		fmt.Fprintf(stderr, "distlock: hold: lock %q was lost; releasing it (up to %v) ...\n", l.Key(), lostReleaseBound)
	}
	releaseLock(cmd, l, giveUp)
	return giveUp, exit(ExitLockLost, fmt.Errorf("hold: lock %q lost: %s", l.Key(), losses.explain()))
}
