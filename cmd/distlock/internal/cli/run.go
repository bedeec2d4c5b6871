package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/observe"
)

// Exit codes of run when the command itself could not be run, as
// env(1), timeout(1) and the shells use them.
const (
	exitCannotRun = 126 // the command was found but could not be started
	exitNotFound  = 127 // no such command
)

// lostReleaseBound bounds what distlock waits, once the command has exited
// after its lock was lost, for the lock's release and the client's close:
// the store may not be answering, the command is stopped already, and the
// lease frees the key in the store anyway. The release is best effort.
const lostReleaseBound = time.Second

// forwardedSignals are passed on to the command's process group: the
// command runs in a group of its own, so the terminal and a service manager
// only reach distlock.
var forwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// runFlags are the flags of distlock run.
type runFlags struct {
	lockFlags   // --key, --owner, --business-id, --lease, --wait, --max-hold
	atLeast     time.Duration
	grace       time.Duration
	skipOK      bool
	conflict    int    // --conflict-exit-code
	conflictOn  bool   // --conflict-exit-code was given
	shell       string // -c: a command line for /bin/sh -c
	shellOn     bool   // -c was given
	permits     int    // -n: at most this many commands at once, over a semaphore
	permitsOn   bool   // -n was given
	shared      bool   // --shared: a reader of the read-write lock KEY
	exclusive   bool   // --exclusive: the writer of the read-write lock KEY
	onRequest   string // --on-release-request: a signal's name, or "none"
	askSignal   syscall.Signal
	oncePer     slotSpec // --once-per: the command runs at most once per slot
	oncePerOn   bool
	records     string // --records: the store of --once-per's records
	retryFailed bool   // --retry-failed: a failed run leaves its slot open
}

func newRunCommand(g *globals) *cobra.Command {
	f := &runFlags{}
	c := &cobra.Command{
		Use:   "run --key KEY [flags] {-- COMMAND [ARGS...] | -c 'SHELL COMMAND'}",
		Short: "Run a command only where a lock is held",
		Long: `run takes the lock KEY and runs COMMAND while it holds it, renewing the
lease every third of it, then releases the lock. -c 'SHELL COMMAND' runs
the string with /bin/sh -c instead (as flock -c does), in the same way.
Started on every replica at the same time (the cron-on-every-replica
problem), the command runs on one of them; the others exit with code 75
(or the code --conflict-exit-code gives, or 0 with --skip-ok) and one line
on stderr saying who holds the key.

distlock exits with the command's exit code, or 128+N if it died of
signal N. If the lock is lost while the command runs (force-released, the
store refused a renewal, could not be reached before the lease ran out, or
--max-hold was reached), the command's process group gets SIGTERM, then
SIGKILL after --grace, and distlock exits with code 76 naming the reason.
A forced release is seen at once on Redis, etcd, ZooKeeper and the lock
service (over distlock:// run adds watch_loss=true to the URL unless it
sets watch_loss), elsewhere at the next renewal; on Redis a key deleted
or taken behind distlock's back is seen at once too. Once the command has
exited, distlock releases the lost lock best effort, waiting for the store
1s at most (said on stderr when the store may still hold the lock): a
store that stopped answering frees the key when the lease runs out.

A request to release the lock (distlock release --request, or
Client.RequestRelease) is said on stderr, and passed on to the command's
process group as the signal --on-release-request names (none by default):
the command can finish its unit of work and exit, and distlock then
releases the lock as usual, with the command's exit code. It is seen at
once on Redis, etcd and the lock service.

The command runs in a process group of its own; SIGINT, SIGTERM, SIGHUP and
SIGQUIT sent to distlock are forwarded to that group, and the lock is
released once the command has exited. The command reads distlock's stdin
(a pipe or a file: always, as consul lock -pass-stdin), except that on a
terminal its stdin is /dev/null, as a process group in the background
cannot read the terminal.
If distlock itself is killed with SIGKILL, the command gets SIGKILL too (on
Linux; commands it started in the background do not) and the lock expires
within its lease.

While run waits for a held key (--wait), a store that fails or stops
answering for a while does not end the wait: distlock asks it again, with
growing pauses, until --wait runs out; a wait that runs out so exits 69,
naming the store's last error.

--at-least D keeps the lock for at least D after it was taken, even if the
command ends sooner, so that replicas whose clocks are a little apart do not
run the job again (ShedLock's lockAtLeastFor): distlock keeps holding and
renewing the lock until D has passed, then releases it and exits. A signal
to distlock ends that wait early.

--once-per PERIOD runs the command at most once per slot of PERIOD, across
every replica, whatever their clocks: a period (1h, 24h; slots start at
00:00 UTC, 168h on Mondays) or a cron schedule ('0 2 * * *', @daily,
CRON_TZ=Europe/Paris 0 2 * * *), whose slot runs from one activation to
the next. Each replica finds the slot by its own clock; a record keyed by
KEY and the slot, written under the lock when the command ends, makes the
others, and every later run in the slot, exit 0 with one line naming the
run there was (silent with --skip-ok). A replica that waited for the lock
(--wait) while the slot ran looks again under the lock. A failed command
is recorded too, with its exit status (--retry-failed: only a run that
exits 0 is recorded). A run whose lock was lost is not recorded: another
run may run the slot again, with a higher DISTLOCK_FENCE. The command gets
DISTLOCK_SLOT, the slot's start in UTC. Records live two slots, in the
store --records names (default --backend): Redis, PostgreSQL or
MySQL/MariaDB, a SQL table created on first use. Replicas triggered at a
slot's start by clocks a little apart agree on the slot; runs triggered
near a boundary by clocks apart may fall in adjacent slots, which
--at-least (at least the clocks' difference) keeps apart.

distlock has no report of its own, only lines on stderr (a failure, a
release request, the release of a lost lock): the command's output passes
through as is, and -o json is refused.

The command gets DISTLOCK_KEY and DISTLOCK_FENCE in its environment (never
the lock's token): pass the fence to what it writes, so that a store
guarded by fences rejects a holder that lost the lock.

-n N runs the command while it holds one of N permits of the semaphore KEY
(as consul lock -n does): at most N commands run at once, each renewed,
stopped on a loss and released as under the lock. The semaphore KEY is not
the lock KEY (runs with and without -n do not exclude each other), and every
run of KEY must give the same N. The command gets DISTLOCK_KEY and
DISTLOCK_PERMITS=N, not DISTLOCK_FENCE: N holders are valid at once, so a
resource that refused all but the highest fence would refuse the others.
Redis, etcd, ZooKeeper, PostgreSQL, the lock service and mem:// keep
semaphores; with another store -n fails with exit 1.

--shared (-s) and --exclusive (-x) take KEY as a reader or as the writer of
the read-write lock KEY (as flock -s and -x do): shared runs hold at once,
an exclusive run holds alone, and an exclusive run that waits keeps new
shared runs out until it has run. Each hold is renewed, stopped on a loss
and released as the lock is. The read-write lock KEY is not the lock KEY
(runs with and without these flags do not exclude each other). The command
gets DISTLOCK_KEY and DISTLOCK_MODE=shared or exclusive; an exclusive
command also gets DISTLOCK_FENCE, above the fence of every hold of KEY
before it, shared or exclusive. A shared command gets no DISTLOCK_FENCE:
several readers are valid at once, so a resource that refused all but the
highest fence would refuse the others. The stores that keep semaphores keep
read-write locks; with another store --shared and --exclusive fail with
exit 1.

Exit codes: the command's own; 0 with --once-per when the slot ran already;
2 bad flags (nothing was sent to the store);
69 store unreachable; 75 held elsewhere (--conflict-exit-code, or 0 with
--skip-ok); 76 lock lost
while the command ran; 126 the command could not be started; 127 no such
command; 128+N distlock was interrupted by signal N before the command ran.`,
		Example: `  distlock run --backend redis://127.0.0.1:6379 --key nightly-report -- ./report.sh --day today
  distlock run --key backup --wait 5m --max-hold 2h -- pg_dump -f /backup/db.sql app
  distlock run --key deploy --wait forever -- ./deploy.sh
  distlock run --key sync --wait 10s --conflict-exit-code 3 -- ./sync.sh
  distlock run --key cleanup --at-least 1m --skip-ok -- sh -c 'echo fence $DISTLOCK_FENCE'
  distlock run --key reindex --on-release-request USR1 -- ./reindex.sh
  distlock run --key transcode -n 4 --wait 10m -- ./transcode.sh
  distlock run --key catalog --shared --wait 1m -- ./export.sh
  distlock run --key catalog --exclusive --wait 10m -- ./rebuild.sh
  distlock run --key rotate -c 'gzip -9 /var/log/app/*.log && ./upload.sh'
  distlock run --key nightly-report --once-per '0 2 * * *' --wait 10m --skip-ok -- ./report.sh
  distlock run --key import --once-per 1h --retry-failed -- ./import.sh
  distlock run --backend distlock://127.0.0.1:7070 --key sync --once-per 1h --records redis://127.0.0.1:6379 -- ./sync.sh`,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.conflictOn = cmd.Flags().Changed("conflict-exit-code")
			f.shellOn = cmd.Flags().Changed("command")
			f.permitsOn = cmd.Flags().Changed("permits")
			f.oncePerOn = cmd.Flags().Changed("once-per")
			argv, err := f.validate(g, args, cmd.ArgsLenAtDash())
			if err != nil {
				return err
			}
			return f.run(cmd, g, argv)
		},
	}
	fl := c.Flags()
	f.lockFlags.add(c, "while the command runs", "stop the command")
	fl.DurationVar(&f.atLeast, "at-least", 0, "keep the lock at least this long after it was taken, even if the command ends sooner")
	fl.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the lock is lost")
	fl.BoolVar(&f.skipOK, "skip-ok", false, "exit 0, silently, when the key is held elsewhere")
	fl.IntVar(&f.conflict, "conflict-exit-code", ExitNotAcquired, "exit code when the key is held elsewhere after --wait (0 to 255)")
	fl.IntVarP(&f.permits, "permits", "n", 0, "run at most N commands at once, each holding a permit of the semaphore KEY (not the lock KEY); the command gets DISTLOCK_PERMITS, not DISTLOCK_FENCE")
	fl.BoolVarP(&f.shared, "shared", "s", false, "hold KEY shared with other --shared runs, as a reader of the read-write lock KEY (not the lock KEY); the command gets DISTLOCK_MODE=shared, not DISTLOCK_FENCE")
	fl.BoolVarP(&f.exclusive, "exclusive", "x", false, "hold KEY alone, as the writer of the read-write lock KEY (not the lock KEY); the command gets DISTLOCK_MODE=exclusive and DISTLOCK_FENCE")
	fl.StringVarP(&f.shell, "command", "c", "", "run this string with /bin/sh -c, instead of a command after --")
	fl.StringVar(&f.onRequest, "on-release-request", "none", "signal the command's process group gets when a release of the lock is requested (TERM, INT, HUP, USR1, ...), or none")
	fl.Var(&f.oncePer, "once-per", "run the command at most once per slot of this period (1h, 24h) or cron schedule ('0 2 * * *', @daily), recorded in --records")
	fl.StringVar(&f.records, "records", "", "with --once-per, the store of its records: a redis://, postgres:// or mysql:// URL (default --backend)")
	fl.BoolVar(&f.retryFailed, "retry-failed", false, "with --once-per, record only a run that exits 0, so that a failed run is tried again in its slot")
	return c
}

// validate checks the flags and the command line after --, and returns the
// command to run. It touches no store.
func (f *runFlags) validate(g *globals, args []string, dash int) ([]string, error) {
	asJSON, err := g.json()
	if err != nil {
		return nil, err
	}
	if asJSON {
		return nil, usage("run: -o json: run prints no report of its own; the command's output passes through as is")
	}
	if err := f.lockFlags.validate("run"); err != nil {
		return nil, err
	}
	if err := f.validateDurations(); err != nil {
		return nil, err
	}
	if err := f.validateOnRequest(); err != nil {
		return nil, err
	}
	switch {
	case f.conflict < 0 || f.conflict > 255:
		return nil, usage("run: --conflict-exit-code %d: want 0 to 255", f.conflict)
	case f.permitsOn && f.permits < 1:
		return nil, usage("run: -n %d: want at least 1 permit", f.permits)
	case f.shared && f.exclusive:
		return nil, usage("run: --shared and --exclusive: give one")
	case f.permitsOn && f.shared:
		return nil, usage("run: -n and --shared: give one (-n is a semaphore, --shared a read-write lock)")
	case f.permitsOn && f.exclusive:
		return nil, usage("run: -n and --exclusive: give one (-n is a semaphore, --exclusive a read-write lock)")
	case f.conflictOn && f.skipOK:
		return nil, usage("run: --conflict-exit-code and --skip-ok both set the exit code of a held key: give one")
	case f.oncePerOn && (f.permitsOn || f.mode() != ""):
		return nil, usage("run: --once-per runs one command per slot: it takes the lock KEY, not -n, --shared or --exclusive")
	case !f.oncePerOn && (f.records != "" || f.retryFailed):
		return nil, usage("run: --records and --retry-failed go with --once-per")
	case f.oncePerOn && len(f.key) > maxOnceKeyLen:
		return nil, usage("run: --once-per: --key of %d bytes: want at most %d, to leave room for the slot in its record's key", len(f.key), maxOnceKeyLen)
	}
	if f.shellOn {
		return f.shellCommand(args, dash)
	}
	switch {
	case dash < 0 && len(args) > 0:
		return nil, usage("run: put -- before the command: distlock run --key KEY [flags] -- %s", args[0])
	case dash < 0 || len(args) == dash:
		return nil, usage("run: no command: want distlock run --key KEY [flags] -- COMMAND [ARGS...], or -c 'SHELL COMMAND'")
	case dash > 0:
		return nil, usage("run: unexpected %q before --: flags go before --, the command after it", args[0])
	}
	argv := args[dash:]
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, exit(exitNotFound, fmt.Errorf("run: %w", err))
	}
	return argv, nil
}

// shellCommand returns the command of -c: /bin/sh -c with its string, if
// nothing else names a command.
func (f *runFlags) shellCommand(args []string, dash int) ([]string, error) {
	switch {
	case f.shell == "":
		return nil, usage("run: -c: empty shell command")
	case dash >= 0 && len(args) > dash:
		return nil, usage("run: give -c or a command after --, not both")
	case len(args) > 0:
		return nil, usage("run: unexpected %q: -c takes the whole command as one string; quote it", args[0])
	}
	return []string{"/bin/sh", "-c", f.shell}, nil
}

// waitValue is the value of --wait: a duration, or forever (also inf),
// which waits until the key is free or distlock is interrupted.
type waitValue time.Duration

func (w *waitValue) String() string {
	if time.Duration(*w) == distlock.WaitUntilContextDone {
		return "forever"
	}
	return time.Duration(*w).String()
}

func (w *waitValue) Set(s string) error {
	if s == "forever" || s == "inf" {
		*w = waitValue(distlock.WaitUntilContextDone)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("want a duration (30s, 5m) or forever")
	}
	*w = waitValue(d)
	return nil
}

func (w *waitValue) Type() string { return "duration" }

// validateDurations checks run's own duration flags, and --at-least against
// --max-hold (lockFlags.validate checks the others).
func (f *runFlags) validateDurations() error {
	switch {
	case f.atLeast < 0, f.grace < 0:
		return usage("run: --at-least and --grace cannot be negative")
	case f.maxHold > 0 && f.atLeast > f.maxHold:
		return usage("run: --at-least %v is longer than --max-hold %v", f.atLeast, f.maxHold)
	}
	return nil
}

// validateOnRequest reads --on-release-request: none, or a signal's name
// with or without its SIG prefix.
func (f *runFlags) validateOnRequest() error {
	name := strings.ToUpper(f.onRequest)
	if name == "NONE" {
		return nil
	}
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if f.askSignal = unix.SignalNum(name); f.askSignal == 0 || f.askSignal == syscall.SIGKILL || f.askSignal == syscall.SIGSTOP {
		return usage("run: --on-release-request %q: want none or a signal the command can handle, such as TERM, INT, HUP or USR1", f.onRequest)
	}
	return nil
}

// run takes the lock, runs argv under it and returns the exit status.
func (f *runFlags) run(cmd *cobra.Command, g *globals, argv []string) error {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)
	// Until the command runs, any of the signals it would get ends distlock.
	ctx, stop := signal.NotifyContext(cmd.Context(), forwardedSignals...)
	defer stop()
	losses := &lossRecorder{}
	// A run holds one lock as long as its command runs: over the lock
	// service, one event stream tells it of the lock's loss at once.
	g.watchLoss = true
	var once *onceRun
	if f.oncePerOn {
		o, closeRecords, err := f.openOnce(ctx, g, argv)
		if err != nil {
			return err
		}
		defer closeRecords()
		if ran, err := f.slotRan(ctx, cmd, o); ran || err != nil {
			return err
		}
		once = o
	}
	client, err := openClient(ctx, g, "run", distlock.WithObserver(losses))
	if err != nil {
		return err
	}
	var giveUp time.Time // set once the lock is known lost: when to stop waiting for the store
	defer func() { closeClient(client, giveUp) }()
	l, held, err := f.take(ctx, client)
	if err != nil {
		return f.notAcquired(ctx, held, err, sigs)
	}
	if ctx.Err() != nil { // a signal came as the lock was granted
		releaseLock(cmd, l, time.Now().Add(distlock.ReleaseBudget))
		return interrupted("run", sigs, "before the command started")
	}
	if once != nil {
		// Another replica may have run the slot while this one waited.
		if ran, err := f.slotRan(ctx, cmd, once); ran || err != nil {
			releaseLock(cmd, l, time.Now().Add(distlock.ReleaseBudget))
			return err
		}
	}
	stop()
	j := &job{flags: f, lock: l, once: once, sigs: sigs, losses: losses, stderr: cmd.ErrOrStderr()}
	err = j.run(cmd, argv)
	giveUp = j.giveUp
	return err
}

// slotRan reports whether the slot of a --once-per run has run already,
// and then the exit status: 0, said on stderr unless --skip-ok.
func (f *runFlags) slotRan(ctx context.Context, cmd *cobra.Command, o *onceRun) (bool, error) {
	earlier, ran, err := o.ran(ctx)
	switch {
	case err != nil:
		return false, exit(ExitUnavailable, &opError{op: "run: --once-per: record store", err: err})
	case !ran:
		return false, nil
	}
	return true, o.alreadyRan(cmd.ErrOrStderr(), f.key, earlier, f.skipOK)
}

// mode is the value of DISTLOCK_MODE and the name of the flag that chose
// the read-write lock: shared or exclusive, or "" for the lock or -n.
func (f *runFlags) mode() string {
	switch {
	case f.shared:
		return "shared"
	case f.exclusive:
		return "exclusive"
	}
	return ""
}

// take takes the lock KEY, with -n a permit of the semaphore KEY, or with
// --shared or --exclusive a hold of the read-write lock KEY. held says,
// when take fails, who holds the lock, the permits or the read-write lock.
func (f *runFlags) take(ctx context.Context, client *distlock.Client) (_ *distlock.Lock, held func(context.Context) string, _ error) {
	if f.mode() != "" {
		return f.takeRW(ctx, client)
	}
	if !f.permitsOn {
		held = func(ctx context.Context) string {
			return fmt.Sprintf("%q is held by %s", f.key, holder(ctx, client, f.key))
		}
		l, err := client.Lock(ctx, f.key, f.lockOptions()...)
		return l, held, err
	}
	held = func(context.Context) string { return fmt.Sprintf("all %d permits of %q are held", f.permits, f.key) }
	sem, err := client.Semaphore(f.key, f.permits)
	if err != nil {
		return nil, held, err
	}
	held = func(ctx context.Context) string {
		return fmt.Sprintf("all %d permits of %q are held%s", f.permits, f.key, permitHolders(ctx, sem))
	}
	l, err := sem.Acquire(ctx, f.lockOptions()...)
	return l, held, err
}

// takeRW takes the read-write lock KEY as a reader (--shared) or the
// writer (--exclusive).
func (f *runFlags) takeRW(ctx context.Context, client *distlock.Client) (_ *distlock.Lock, held func(context.Context) string, _ error) {
	held = func(context.Context) string { return fmt.Sprintf("%q is held by another owner", f.key) }
	rw, err := client.RWMutex(f.key)
	if err != nil {
		return nil, held, err
	}
	held = func(ctx context.Context) string { return rwHolders(ctx, rw, f.key) }
	if f.shared {
		l, err := rw.RLock(ctx, f.lockOptions()...)
		return l, held, err
	}
	l, err := rw.Lock(ctx, f.lockOptions()...)
	return l, held, err
}

// rwHolders says who holds the read-write lock key, as far as the store
// says within a second: its writer, its readers, or the writers whose wait
// keeps new readers out.
func rwHolders(ctx context.Context, rw *distlock.RWMutex, key string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := rw.Inspect(ctx)
	switch {
	case err != nil:
		return fmt.Sprintf("%q is held by another owner", key)
	case info.Writer:
		v := viewOf(info.Held[0])
		return fmt.Sprintf("%q is held exclusively by %s (fence %d, lease left %s)", key, v.owner(), v.Fence, v.leaseLeft())
	case len(info.Held) > 0:
		owners := make([]string, len(info.Held))
		for i, h := range info.Held {
			owners[i] = viewOf(h).owner()
		}
		s := fmt.Sprintf("%q is held shared by %s", key, strings.Join(owners, ", "))
		if info.WritersWaiting > 0 {
			s += fmt.Sprintf(", with %d exclusive waiting", info.WritersWaiting)
		}
		return s
	case info.WritersWaiting > 0:
		return fmt.Sprintf("%q has %d exclusive waiting, which keep shared runs out until they have run", key, info.WritersWaiting)
	}
	return fmt.Sprintf("%q is held by another owner", key)
}

// permitHolders names the holders of sem's permits, as far as the store
// says within a second: " (by A, B)", or "" if it does not.
func permitHolders(ctx context.Context, sem *distlock.Semaphore) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := sem.Inspect(ctx)
	if err != nil || len(info.Held) == 0 {
		return ""
	}
	owners := make([]string, len(info.Held))
	for i, h := range info.Held {
		owners[i] = viewOf(h).owner()
	}
	return " (by " + strings.Join(owners, ", ") + ")"
}

// closeClient closes the client. Given a deadline (the lock was lost, and
// the store may not be answering) it waits for the close at most until then
// and leaves it running: the process ends right after, and the store frees
// what it still holds when the lease runs out.
func closeClient(c *distlock.Client, deadline time.Time) {
	if deadline.IsZero() {
		_ = c.Close()
		return
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = c.Close()
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-closed:
	case <-t.C:
	}
}

// notAcquired turns a failed Lock into the exit status: held elsewhere
// (held says by whom), a wait outlasted by a failing store, interrupted,
// bad options, a store without semaphores (-n) or read-write locks
// (--shared, --exclusive), or a store failure.
func (f *runFlags) notAcquired(ctx context.Context, held func(context.Context) string, err error, sigs <-chan os.Signal) error {
	switch {
	case ctx.Err() != nil:
		return interrupted("run", sigs, "while waiting for the lock")
	case errors.Is(err, distlock.ErrNotAcquired) && f.outlasted(err) != "":
		return exit(ExitUnavailable, fmt.Errorf("run: %s; the command was not run", f.outlasted(err)))
	case errors.Is(err, distlock.ErrNotAcquired) && f.skipOK:
		return nil
	case errors.Is(err, distlock.ErrNotAcquired):
		return exit(f.conflict, fmt.Errorf("run: %s; the command was not run", held(ctx)))
	case errors.Is(err, distlock.ErrInvalidOption), errors.Is(err, distlock.ErrInvalidKey):
		return exit(ExitUsage, &opError{op: "run", err: err})
	case errors.Is(err, errors.ErrUnsupported) && f.mode() != "":
		return exit(ExitError, &opError{op: "run: --" + f.mode(), err: err})
	case errors.Is(err, errors.ErrUnsupported):
		return exit(ExitError, &opError{op: "run: -n", err: err})
	}
	return exit(ExitUnavailable, &opError{op: "run", err: err})
}

// holder describes who holds key, as far as the store says within a second.
func holder(ctx context.Context, client *distlock.Client, key string) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := client.Inspect(ctx, key)
	if err != nil || !info.Held {
		return "another owner"
	}
	v := viewOf(info)
	return fmt.Sprintf("%s (fence %d, lease left %s)", v.owner(), v.Fence, v.leaseLeft())
}

// interrupted is the exit status of command op (run, hold) that a signal
// ended before it held the lock or started its command: 128 + the signal's
// number, like a shell's.
func interrupted(op string, sigs <-chan os.Signal, when string) error {
	sig := syscall.SIGINT
	select {
	case s := <-sigs:
		sig = s.(syscall.Signal)
	case <-time.After(time.Second): // the context ended without a signal
	}
	return exit(128+int(sig), fmt.Errorf("%s: interrupted by %s %s", op, unix.SignalName(sig), when))
}

// releaseLock releases l, waiting for the store until deadline at most, with
// a context of its own, as the command's may be cancelled. It warns on
// stderr if the store no longer held the lock (lost between two renewals,
// unnoticed) or did not confirm the release; a loss already reported needs
// no warning.
func releaseLock(cmd *cobra.Command, l *distlock.Lock, deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.WithoutCancel(cmd.Context()), deadline)
	defer cancel()
	err := l.Release(ctx)
	switch {
	case err == nil, errors.Is(err, distlock.ErrLockLost):
	case errors.Is(err, distlock.ErrNotHeld):
		fmt.Fprintf(cmd.ErrOrStderr(), "distlock: warning: lock %q was no longer held when released: it was deleted, expired or force-released after its last renewal\n", l.Key())
	default:
		fmt.Fprintf(cmd.ErrOrStderr(), "distlock: warning: %s (the store frees the key when its lease runs out)\n",
			strings.TrimPrefix(err.Error(), "distlock: "))
	}
}

// lossRecorder is an observer that keeps the reason a lock was lost, which
// the lock's error carries only as text.
type lossRecorder struct {
	mu     sync.Mutex
	reason string
}

// AcquireStarted implements observe.Observer.
func (r *lossRecorder) AcquireStarted(ctx context.Context, _ observe.Event) context.Context {
	return ctx
}

// Observe implements observe.Observer: it keeps the first loss reason.
func (r *lossRecorder) Observe(_ context.Context, e observe.Event) {
	if e.Kind != observe.Lost {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reason == "" {
		r.reason = e.Reason
	}
}

// storeMayHold reports whether the store may still hold the lost lock, so
// that its release asks the store (as Lock.Release does): not when the store
// said the lock was no longer this run's.
func (r *lossRecorder) storeMayHold() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.reason {
	case observe.LossTaken, observe.LossDeleted, observe.LossRenewRefused, observe.LossStoreDeleted:
		return false
	}
	return true
}

// explain says in words why the lock was lost, with the reason's name.
func (r *lossRecorder) explain() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.reason {
	case observe.LossTaken:
		return "taken by another holder (taken): distlock's hold was deleted, expired or force-released, and the key granted again"
	case observe.LossDeleted:
		return "the key was deleted (deleted): it is free in the store; distlock's hold was deleted, evicted, expired or force-released"
	case observe.LossRenewRefused:
		return "renewal refused (renew_refused): the store no longer holds the lock for distlock; it was deleted, expired or force-released"
	case observe.LossUnreachable:
		return "store unreachable (unreachable): no renewal was confirmed before the lease ran out"
	case observe.LossMaxHold:
		return "--max-hold reached (max_hold)"
	case observe.LossStoreDeleted:
		return "the store reported the lock gone (store_deleted): force-released, or the session or connection that held it ended"
	}
	return r.reason
}

// job is a command running under a held lock.
type job struct {
	flags  *runFlags
	lock   *distlock.Lock
	once   *onceRun // under --once-per
	sigs   <-chan os.Signal
	losses *lossRecorder
	stderr io.Writer
	child  *exec.Cmd
	killed bool      // SIGKILL was sent after --grace
	giveUp time.Time // the lock was lost: the end of the wait for its release and the client's close
}

// run starts argv, supervises it, keeps the lock for --at-least, releases
// it and returns the exit status.
func (j *job) run(cmd *cobra.Command, argv []string) error {
	if err := j.start(cmd, argv); err != nil {
		j.release(cmd)
		return exit(exitCannotRun, fmt.Errorf("run: %w", err))
	}
	waitErr, lost := j.supervise()
	if !lost {
		j.record(waitErr)
		j.holdAtLeast(cmd)
	}
	j.release(cmd)
	if lost {
		return exit(ExitLockLost, j.lostError())
	}
	return commandStatus(argv[0], waitErr)
}

// release releases the lock once the command has exited. A lock known lost
// is released best effort, within lostReleaseBound, said on stderr if the
// store may still hold it (it may not be answering): the lease frees the
// key anyway.
func (j *job) release(cmd *cobra.Command) {
	select {
	case <-j.lock.Done():
	default:
		releaseLock(cmd, j.lock, time.Now().Add(distlock.ReleaseBudget))
		return
	}
	j.giveUp = time.Now().Add(lostReleaseBound)
	if j.losses.storeMayHold() {
		fmt.Fprintf(j.stderr, "distlock: run: lock %q was lost; releasing it (up to %v) ...\n", j.lock.Key(), lostReleaseBound)
	}
	releaseLock(cmd, j.lock, j.giveUp)
}

// start starts argv in a process group of its own, with DISTLOCK_KEY and
// DISTLOCK_FENCE added to the environment (with -n, DISTLOCK_PERMITS instead
// of the fence; with --shared or --exclusive, DISTLOCK_MODE, and the fence
// only if exclusive).
func (j *job) start(cmd *cobra.Command, argv []string) error {
	c := exec.Command(argv[0], argv[1:]...)
	if in := cmd.InOrStdin(); !isTerminal(in) {
		c.Stdin = in
	}
	c.Stdout, c.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	c.Env = append(os.Environ(), "DISTLOCK_KEY="+j.lock.Key())
	switch {
	case j.flags.permitsOn:
		// A permit's fence fences nothing: N holders are valid at once.
		c.Env = append(c.Env, "DISTLOCK_PERMITS="+strconv.Itoa(j.flags.permits))
	case j.flags.shared:
		// Nor does a reader's: several readers are valid at once.
		c.Env = append(c.Env, "DISTLOCK_MODE=shared")
	case j.flags.exclusive:
		c.Env = append(c.Env, "DISTLOCK_MODE=exclusive",
			"DISTLOCK_FENCE="+strconv.FormatUint(j.lock.Fence(), 10))
	default:
		c.Env = append(c.Env, "DISTLOCK_FENCE="+strconv.FormatUint(j.lock.Fence(), 10))
	}
	if j.once != nil {
		c.Env = append(c.Env, "DISTLOCK_SLOT="+j.once.slot.id())
		j.once.started = time.Now()
	}
	c.SysProcAttr = jobProcAttr()
	j.child = c
	return c.Start()
}

// record keeps, under --once-per, that the command ran in its slot, with
// its exit status (with --retry-failed, only if it was 0), while the lock
// is still held: a replica that waited for the lock then finds the record.
func (j *job) record(waitErr error) {
	if j.once == nil {
		return
	}
	code := exitCodeOf(waitErr)
	if code != 0 && j.flags.retryFailed {
		fmt.Fprintf(j.stderr, "distlock: run: slot %s not recorded (--retry-failed): the command exited %d\n", j.once.slot.id(), code)
		return
	}
	j.once.record(j.stderr, j.lock.Fence(), code)
}

// supervise waits for the command to exit, forwarding signals to its group
// and stopping it if the lock is lost. It returns Wait's error and whether
// the lock was lost.
func (j *job) supervise() (waitErr error, lost bool) {
	exited := make(chan error, 1)
	go func() { exited <- j.child.Wait() }()
	done, asked := j.lock.Done(), j.lock.ReleaseRequested()
	grace := time.NewTimer(time.Hour)
	grace.Stop()
	defer grace.Stop()
	for {
		select {
		case s := <-j.sigs:
			j.signal(s.(syscall.Signal))
		case <-done:
			done = nil
			lost = true
			j.signal(syscall.SIGTERM)
			grace.Reset(j.flags.grace)
		case <-asked:
			asked = nil
			j.released()
		case <-grace.C:
			j.killed = true
			j.signal(syscall.SIGKILL)
		case err := <-exited:
			return err, lost
		}
	}
}

// released tells of a request to release the lock, and passes it on to the
// command as --on-release-request says.
func (j *job) released() {
	what := "the command goes on (--on-release-request passes it on as a signal)"
	if j.flags.askSignal != 0 {
		what = "the command's process group gets " + unix.SignalName(j.flags.askSignal)
		j.signal(j.flags.askSignal)
	}
	fmt.Fprintf(j.stderr, "distlock: a release of lock %q was requested: %s; %s\n", j.lock.Key(), j.lock.ReleaseReason(), what)
}

// signal sends sig to the command's process group. A group that is gone
// already needs nothing.
func (j *job) signal(sig syscall.Signal) {
	_ = syscall.Kill(-j.child.Process.Pid, sig)
}

// lostError is the error of a run whose lock was lost: it names the
// reason and how the command was stopped.
func (j *job) lostError() error {
	how := "the command was stopped with SIGTERM"
	if j.killed {
		how = fmt.Sprintf("the command did not stop within --grace %v and was killed with SIGKILL", j.flags.grace)
	}
	return fmt.Errorf("run: lock %q lost while the command ran: %s; %s", j.lock.Key(), j.losses.explain(), how)
}

// holdAtLeast keeps the lock, renewed by the watchdog, until --at-least has
// passed since it was taken, the lock is lost, or a signal arrives.
func (j *job) holdAtLeast(cmd *cobra.Command) {
	left := j.flags.atLeast - j.lock.HeldFor()
	if left <= 0 {
		return
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
	case <-cmd.Context().Done():
	case <-j.lock.Done():
		fmt.Fprintf(cmd.ErrOrStderr(), "distlock: warning: the command ended, but the lock was lost before --at-least %v (%s)\n",
			j.flags.atLeast, j.losses.explain())
	}
}

// exitCodeOf returns the exit status a shell would give for the command's
// Wait error: its code, 128+N if it died of signal N, or 1 if it could not
// be waited for.
func exitCodeOf(waitErr error) int {
	var ee *exec.ExitError
	switch {
	case waitErr == nil:
		return 0
	case !errors.As(waitErr, &ee):
		return ExitError
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

// commandStatus turns the command's Wait error into distlock's exit status:
// the command's code, or 128+N if it died of signal N.
func commandStatus(name string, waitErr error) error {
	var ee *exec.ExitError
	if waitErr == nil {
		return nil
	}
	if !errors.As(waitErr, &ee) {
		return fmt.Errorf("run: wait for %s: %w", name, waitErr)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exit(128+int(ws.Signal()), fmt.Errorf("run: %s was killed by %s (signal %d)", name, unix.SignalName(ws.Signal()), ws.Signal()))
	}
	return exit(ee.ExitCode(), fmt.Errorf("run: %s exited with status %d", name, ee.ExitCode()))
}
