package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
)

// lockFlags are the flags with which run and hold take a lock.
type lockFlags struct {
	key        string
	owner      string
	businessID string
	lease      time.Duration
	wait       time.Duration
	maxHold    time.Duration
}

// add registers the flags on c. held says when the lock is renewed ("while
// the command runs"), lost what a lost lock does ("stop the command").
func (f *lockFlags) add(c *cobra.Command, held, lost string) {
	fl := c.Flags()
	fl.StringVar(&f.key, "key", "", "lock key (required)")
	fl.StringVar(&f.owner, "owner", "", "owner recorded with the lock (default USER@HOST pid N)")
	fl.StringVar(&f.businessID, "business-id", "", "business id recorded with the lock, shown by status and list")
	fl.DurationVar(&f.lease, "lease", distlock.DefaultLease, "lease; the lock is renewed every third of it "+held)
	fl.Var((*waitValue)(&f.wait), "wait", "how long to wait for a held key: a duration, or forever (inf); 0 tries once")
	fl.DurationVar(&f.maxHold, "max-hold", 0, "stop renewing after this long and "+lost+" as on a lost lock; 0 is no cap")
}

// validate checks the key and the durations for the command op. It touches
// no store.
func (f *lockFlags) validate(op string) error {
	if f.key == "" {
		return usage("%s: --key is required", op)
	}
	if err := distlock.ValidateKey(f.key); err != nil {
		return exit(ExitUsage, &opError{op: op + ": --key", err: err})
	}
	switch {
	case f.lease < distlock.MinLease:
		return usage("%s: --lease %v: want at least %v", op, f.lease, distlock.MinLease)
	case f.wait < 0 && f.wait != distlock.WaitUntilContextDone:
		return usage("%s: --wait %v: cannot be negative (forever waits until the key is free)", op, f.wait)
	case f.maxHold < 0:
		return usage("%s: --max-hold %v: cannot be negative (0 is no cap)", op, f.maxHold)
	}
	return nil
}

// lockOptions returns the library options the flags ask for: an explicit
// lease with the watchdog on, so the lock is renewed while it is held.
func (f *lockFlags) lockOptions() []distlock.Option {
	opts := []distlock.Option{
		distlock.WithLease(f.lease), distlock.WithWatchdog(true),
		distlock.WithWait(f.wait), distlock.WithOwner(f.ownerName()),
	}
	if f.businessID != "" {
		opts = append(opts, distlock.WithBusinessID(f.businessID))
	}
	if f.maxHold > 0 {
		opts = append(opts, distlock.WithMaxHold(f.maxHold))
	}
	return opts
}

// ownerName returns --owner, or USER@HOST pid N without it.
func (f *lockFlags) ownerName() string {
	if f.owner != "" {
		return f.owner
	}
	return fmt.Sprintf("%s pid %d", operator(), os.Getpid())
}

// outlasted says why a wait (--wait) ran out while the store was failing,
// if it did: the library joins the store's last error to ErrNotAcquired.
// It returns "" if the wait ran out on a key that was held.
func (f *lockFlags) outlasted(err error) string {
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		return ""
	}
	for _, e := range joined.Unwrap() {
		switch {
		case e == nil, e == context.DeadlineExceeded, e == context.Canceled, errors.Is(e, distlock.ErrNotAcquired):
			continue // the wait's own end; a store call that timed out wraps its error
		}
		return fmt.Sprintf("%q was not acquired within --wait %s: the store failed: %s",
			f.key, (*waitValue)(&f.wait), strings.ReplaceAll(strings.TrimPrefix(e.Error(), "distlock: "), "\n", "; "))
	}
	return ""
}
