package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/policy"
)

// maxWatchedFile bounds what serve reads of a token, policy or certificate
// file, so that a wrong path (a log file, a device) cannot fill memory.
const maxWatchedFile = 16 << 20

// watchedFile is a file serve reads at start and again when it changes.
//
// Changes are found by polling every second, not with inotify (fsnotify):
// editors and configuration tools replace a file by renaming a new one over
// it, and Kubernetes swaps a symlink to a new directory, which leave an
// inotify watch on the old inode; network and FUSE file systems send no
// events at all. A stat a second, and a read and hash only when the size or
// modification time moved, catch all of these for the cost of nothing, with
// at most a second of delay.
type watchedFile struct {
	path string
	what string // "token file", "policy file", ...
	// load applies the file's content; an error refuses it, and the
	// content in force stays.
	load func(data []byte) error

	size    int64
	modTime time.Time
	sum     [sha256.Size]byte // of the last content tried, applied or not
	failed  bool              // the last content tried was refused
	statErr string            // the last stat or read error logged
}

// first loads the file at start. Its error names the file (and, through
// the loader, the line at fault).
func (w *watchedFile) first() error {
	fi, data, err := w.read()
	if err != nil {
		return err
	}
	if err := w.load(data); err != nil {
		return err
	}
	w.size, w.modTime, w.sum = fi.Size(), fi.ModTime(), sha256.Sum256(data)
	return nil
}

// read stats and reads the file, within maxWatchedFile.
func (w *watchedFile) read() (os.FileInfo, []byte, error) {
	fi, err := os.Stat(w.path)
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() > maxWatchedFile {
		return nil, nil, fmt.Errorf("%s: %d bytes, over the %d a %s may have", w.path, fi.Size(), maxWatchedFile, w.what)
	}
	data, err := os.ReadFile(w.path)
	if err != nil {
		return nil, nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		// An empty file is most likely one being rewritten in place; in
		// force it would drop every token or every limit.
		return nil, nil, fmt.Errorf("%s is empty", w.path)
	}
	return fi, data, nil
}

// reload loads the file again if it changed (its size or modification time
// moved and its content differs), or, with force (SIGHUP), if its content
// differs or was refused last time. It logs what it did; a refused file
// is logged once per content.
func (w *watchedFile) reload(log *slog.Logger, force bool) {
	fi, err := os.Stat(w.path)
	if err == nil && !force && fi.Size() == w.size && fi.ModTime().Equal(w.modTime) {
		return
	}
	var data []byte
	if err == nil {
		fi, data, err = w.read()
	}
	if err != nil {
		if msg := err.Error(); msg != w.statErr || force {
			w.statErr = msg
			log.Error("reload refused: keeping the "+w.what+" in force", "file", w.path, "err", err)
		}
		return
	}
	w.statErr = ""
	w.size, w.modTime = fi.Size(), fi.ModTime()
	sum := sha256.Sum256(data)
	if sum == w.sum && !(force && w.failed) {
		if force {
			log.Info(w.what+" unchanged", "file", w.path)
		}
		return
	}
	w.sum = sum
	if err := w.load(data); err != nil {
		w.failed = true
		log.Error("reload refused: keeping the "+w.what+" in force", "file", w.path, "err", err)
		return
	}
	w.failed = false
	log.Info("reloaded "+w.what, "file", w.path)
}

// livePolicy is the client's distlock.Policy and observe.Observer when
// serve has --config: it delegates to the policy.Policy loaded last, so a
// reloaded policy file takes effect without a new client. A new policy
// starts with an empty latency window: a group that was degraded is not
// any more until the store is slow again.
type livePolicy struct {
	cur atomic.Pointer[loadedPolicy]
	// hooks hear of degradation; set before the client that uses the
	// policy is built.
	hooks []func(group string, active bool, p99 time.Duration)
}

// loadedPolicy is a policy and the config it came from.
type loadedPolicy struct {
	p   *policy.Policy
	cfg policy.Config
}

var (
	_ distlock.Policy  = (*livePolicy)(nil)
	_ observe.Observer = (*livePolicy)(nil)
)

// load parses a policy file's content and puts it in force.
func (l *livePolicy) load(data []byte) error {
	cfg, err := policy.Load(bytes.NewReader(data))
	if err != nil {
		return err
	}
	if err := servesKeys(cfg); err != nil {
		return err
	}
	lp := &loadedPolicy{cfg: cfg}
	// Only the policy in force reports degradation: one replaced while it
	// evaluated its window must not set a gauge the new one owns.
	p, err := policy.New(cfg, policy.OnDegradation(func(group string, active bool, p99 time.Duration) {
		if l.cur.Load() == lp {
			l.degradation(group, active, p99)
		}
	}))
	if err != nil {
		return err
	}
	lp.p = p
	if old := l.cur.Swap(lp); old != nil {
		l.endDegradation(old)
	}
	return nil
}

// degradation calls the hooks.
func (l *livePolicy) degradation(group string, active bool, p99 time.Duration) {
	for _, h := range l.hooks {
		h(group, active, p99)
	}
}

// endDegradation tells the hooks that the groups old had degraded are not
// any more: the new policy begins afresh, and a gauge left at 1 would lie.
func (l *livePolicy) endDegradation(old *loadedPolicy) {
	names := []string{old.cfg.Default.Name}
	if names[0] == "" {
		names[0] = policy.DefaultGroup
	}
	for _, g := range old.cfg.Groups {
		names = append(names, g.Name)
	}
	for _, name := range names {
		if old.p.Degraded(name) {
			l.degradation(name, false, 0)
		}
	}
}

// Apply applies the policy in force.
func (l *livePolicy) Apply(ctx context.Context, r *distlock.Request) error {
	if cur := l.cur.Load(); cur != nil {
		return cur.p.Apply(ctx, r)
	}
	return nil
}

// Lease is the lease of key's group in the policy in force, for requests
// that name none; zero if it sets none.
func (l *livePolicy) Lease(key string) time.Duration {
	if cur := l.cur.Load(); cur != nil {
		return cur.p.Lease(key)
	}
	return 0
}

// MaxHold is the max_hold of key's group in the policy in force.
func (l *livePolicy) MaxHold(key string) time.Duration {
	if cur := l.cur.Load(); cur != nil {
		return cur.p.MaxHold(key)
	}
	return 0
}

// AcquireStarted returns ctx unchanged.
func (l *livePolicy) AcquireStarted(ctx context.Context, _ observe.Event) context.Context {
	return ctx
}

// Observe gives e to the policy in force, which measures the store's
// latency.
func (l *livePolicy) Observe(ctx context.Context, e observe.Event) {
	if cur := l.cur.Load(); cur != nil {
		cur.p.Observe(ctx, e)
	}
}

// The service keeps tenant T's key K as "tenants/T/K" and a session's as
// "sessions/T/...": a policy's prefixes match those.
var serviceRoots = []string{"tenants/", "sessions/"}

// servesKeys refuses a policy with a group prefix that no key of the
// service can have (orders/, written as a client names its keys): its
// group would silently govern nothing.
func servesKeys(cfg policy.Config) error {
	for _, g := range cfg.Groups {
		for _, p := range g.Prefixes {
			if !slices.ContainsFunc(serviceRoots, func(root string) bool {
				return strings.HasPrefix(p, root) || strings.HasPrefix(root, p)
			}) {
				return fmt.Errorf("group %q: prefix %q matches no key of the service, which keeps tenant T's key K as tenants/T/K: write tenants/<tenant>/%s", g.Name, p, p)
			}
		}
	}
	return nil
}
