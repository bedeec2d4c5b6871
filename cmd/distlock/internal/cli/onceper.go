package cli

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	_ "time/tzdata" // CRON_TZ= zones on a machine without a zone database

	"github.com/robfig/cron/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/idem"
	_ "github.com/distlock/distlock/idem/mysqlstore" // mysql:// records
	_ "github.com/distlock/distlock/idem/pgstore"    // postgres:// records
	_ "github.com/distlock/distlock/idem/redisstore" // redis:// records
)

// slotSpec is the value of --once-per: a period, whose slots are aligned
// on 00:00 UTC of 1 January of year 1 (so a period that divides a day
// starts its slots at 00:00 UTC, and 168h on Mondays), or a cron schedule,
// whose slots run from one activation to the next.
type slotSpec struct {
	text     string
	period   time.Duration
	schedule cron.Schedule
}

func (s *slotSpec) String() string { return s.text }

func (s *slotSpec) Type() string { return "period" }

func (s *slotSpec) Set(v string) error {
	if d, err := time.ParseDuration(v); err == nil {
		if d < time.Second || d%time.Second != 0 {
			return errors.New("want a period of whole seconds, 1s or more (1h, 24h), or a cron schedule ('0 2 * * *', @daily)")
		}
		*s = slotSpec{text: v, period: d}
		return nil
	}
	if strings.HasPrefix(v, "@every") {
		return errors.New("@every counts from when it is read, not from a slot's start: give the period itself (1h)")
	}
	sched, err := cron.ParseStandard(v)
	if err != nil {
		return fmt.Errorf("want a period (1h, 24h) or a cron schedule ('0 2 * * *', @daily): %w", err)
	}
	*s = slotSpec{text: v, schedule: sched}
	return nil
}

// slot is one slot of a --once-per schedule.
type slot struct {
	start, end time.Time
}

// id names the slot in its record's key and in DISTLOCK_SLOT: its start,
// in UTC, to the second.
func (s slot) id() string { return s.start.UTC().Format(time.RFC3339) }

// slotAt returns the slot that now falls in, and false if a cron schedule
// has no activation within five years before now or after the slot's
// start.
func (s *slotSpec) slotAt(now time.Time) (slot, bool) {
	if s.schedule == nil {
		start := now.Truncate(s.period)
		return slot{start: start, end: start.Add(s.period)}, true
	}
	start, ok := lastActivation(s.schedule, now)
	if !ok {
		return slot{}, false
	}
	end := s.schedule.Next(start)
	return slot{start: start, end: end}, !end.IsZero()
}

// maxLookBack is how far back lastActivation looks: the five years within
// which the cron package looks for a next activation.
const maxLookBack = 5 * 366 * 24 * time.Hour

// lastActivation returns sched's last activation at or before now. It
// looks back twice as far each time, from a minute, until an activation
// falls at or before now, then walks forward to the last.
func lastActivation(sched cron.Schedule, now time.Time) (time.Time, bool) {
	for back := time.Minute; back <= 2*maxLookBack; back *= 2 {
		t := sched.Next(now.Add(-back))
		if t.IsZero() {
			return time.Time{}, false
		}
		if t.After(now) {
			continue
		}
		for {
			next := sched.Next(t)
			if next.IsZero() || next.After(now) {
				return t, true
			}
			t = next
		}
	}
	return time.Time{}, false
}

// recordSuffix is what a record's key adds to the lock key: the slot.
const recordSuffix = "/once/"

// maxOnceKeyLen is the longest lock key --once-per takes: its records'
// keys, the key and the slot, are as long as a lock key may be at most,
// which the SQL stores' key columns hold.
const maxOnceKeyLen = distlock.MaxKeyLen - len(recordSuffix+"2006-01-02T15:04:05Z")

// onceRun is a run under --once-per: the records of its job's slots, and
// the slot it runs in.
type onceRun struct {
	records idem.Store
	key     string // the record's: the lock key, /once/, the slot's id
	slot    slot
	hash    [32]byte // of the command line
	owner   string
	started time.Time
}

// outcome is the record's value: who ran the command of a slot, and how it
// ended.
type outcome struct {
	Exit    int       `json:"exit"`
	Owner   string    `json:"owner"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
}

// openOnce opens the record store of --once-per (--records, else the lock
// store) and finds the slot now falls in.
func (f *runFlags) openOnce(ctx context.Context, g *globals, argv []string) (*onceRun, func(), error) {
	now := time.Now()
	sl, ok := f.oncePer.slotAt(now)
	if !ok {
		return nil, nil, usage("run: --once-per %q: no activation within five years of now", f.oncePer.text)
	}
	rawURL := f.records
	if rawURL == "" {
		u, err := g.backendURL()
		if err != nil {
			return nil, nil, err
		}
		rawURL = u
	}
	records, closeRecords, err := idem.OpenURL(ctx, rawURL)
	switch {
	case errors.Is(err, idem.ErrNoURLStore) && f.records == "":
		scheme, _, _ := strings.Cut(rawURL, ":")
		return nil, nil, exit(ExitUsage, fmt.Errorf("run: --once-per: %s:// keeps no records: give --records URL of a Redis, PostgreSQL or MySQL/MariaDB: %w", scheme, idem.ErrNoURLStore))
	case errors.Is(err, idem.ErrNoURLStore), errors.Is(err, distlock.ErrInvalidOption):
		return nil, nil, exit(ExitUsage, &opError{op: "run: --records", err: err})
	case err != nil:
		return nil, nil, exit(ExitUnavailable, &opError{op: "run: --once-per: record store", err: err})
	}
	return &onceRun{
		records: records,
		key:     f.key + recordSuffix + sl.id(),
		slot:    sl,
		hash:    sha256.Sum256([]byte(strings.Join(argv, "\x00"))),
		owner:   f.ownerName(),
	}, closeRecords, nil
}

// earlierRun is the record of a slot's run.
type earlierRun struct {
	outcome
	fence       uint64
	sameCommand bool // it ran this command line
}

// ran returns the record of the slot's run, if there is one.
func (o *onceRun) ran(ctx context.Context) (earlierRun, bool, error) {
	r, ok, err := o.records.Get(ctx, o.key)
	if err != nil || !ok {
		return earlierRun{}, false, err
	}
	e := earlierRun{fence: r.Fence, sameCommand: r.Hash == o.hash}
	if err := json.Unmarshal(r.Value, &e.outcome); err != nil {
		return earlierRun{}, false, fmt.Errorf("record %q: %w", o.key, err)
	}
	return e, true, nil
}

// alreadyRan is the exit status of a run whose slot has run: 0, with a line
// on stderr unless quiet, which says if that run's command line was
// another.
func (o *onceRun) alreadyRan(stderr io.Writer, lockKey string, e earlierRun, quiet bool) error {
	if quiet {
		return nil
	}
	other := ""
	if !e.sameCommand {
		other = ", another command line"
	}
	fmt.Fprintf(stderr, "distlock: run: %q already ran in slot %s (by %s at %s, fence %d, exit %d%s); the command was not run\n",
		lockKey, o.slot.id(), e.Owner, e.Started.UTC().Format(time.RFC3339), e.fence, e.Exit, other)
	return nil
}

// record keeps the outcome of the slot's run for two slots' time, so that
// a replica whose clock is up to a slot behind still finds it. It warns on
// stderr if it could not: the slot may then run again.
func (o *onceRun) record(stderr io.Writer, fence uint64, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), distlock.ReleaseBudget)
	defer cancel()
	value, _ := json.Marshal(outcome{Exit: code, Owner: o.owner, Started: o.started, Ended: time.Now()})
	keep := max(2*o.slot.end.Sub(o.slot.start), time.Minute)
	ok, err := o.records.Put(ctx, o.key, idem.Record{Hash: o.hash, Value: value, Failed: code != 0, Fence: fence}, keep)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "distlock: warning: run: the run of slot %s was not recorded (%v): another run may run it again\n", o.slot.id(), err)
	case !ok:
		fmt.Fprintf(stderr, "distlock: warning: run: slot %s was recorded by another run meanwhile: the lock was lost unnoticed, and the command ran twice in the slot\n", o.slot.id())
	}
}
