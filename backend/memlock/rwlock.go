package memlock

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.RWLocks      = (*Backend)(nil)
	_ driver.RWDowngrader = (*Backend)(nil)
)

// rwLock is a read-write lock's state: its holds by token, all of one mode,
// and its waiting writers' intents by id, with their expiry.
type rwLock struct {
	mode    driver.Mode
	holds   map[string]*entry
	intents map[string]time.Time
}

// rwWatchName is the watchers' name of read-write lock name's releases:
// never a lock's key or a semaphore's watch name.
func rwWatchName(name string) string { return "\x00rw\x00" + name }

// liveLocked drops l's expired holds and intents.
func (l *rwLock) liveLocked(now time.Time) {
	maps.DeleteFunc(l.holds, func(_ string, e *entry) bool { return !now.Before(e.expires) })
	maps.DeleteFunc(l.intents, func(_ string, exp time.Time) bool { return !now.Before(exp) })
}

// rwLocked returns name's live state, made if missing.
func (b *store) rwLocked(name string, now time.Time) *rwLock {
	l := b.rws[name]
	if l == nil {
		l = &rwLock{holds: make(map[string]*entry), intents: make(map[string]time.Time)}
		b.rws[name] = l
	}
	l.liveLocked(now)
	return l
}

// dropIfIdleLocked forgets name's state once nothing is held or waited for.
func (b *store) dropIfIdleLocked(name string, l *rwLock) {
	if len(l.holds) == 0 && len(l.intents) == 0 {
		delete(b.rws, name)
	}
}

// AcquireRW takes name req.Key in mode for req.Token if the holds and
// intents allow it (driver.RWLocks).
func (b *Backend) AcquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (driver.Grant, error) {
	if err := b.check(ctx); err != nil {
		return driver.Grant{}, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.rwLocked(req.Key, now)
	if e := l.holds[req.Token]; e != nil {
		return driver.Grant{Fence: e.fence}, nil // a retried request that already won
	}
	free := len(l.holds) == 0
	if mode == driver.Shared {
		free = (free || l.mode == driver.Shared) && len(l.intents) == 0
	}
	if !free {
		if mode == driver.Exclusive && req.Intent != "" {
			l.intents[req.Intent] = now.Add(driver.WriteIntentTTL)
		}
		return driver.Grant{}, fmt.Errorf("%w: wanted %s, held %s by %d, %d writers waiting",
			driver.ErrNotAcquired, mode, l.mode, len(l.holds), len(l.intents))
	}
	delete(l.intents, req.Intent)
	b.fence++
	l.mode = mode
	l.holds[req.Token] = &entry{token: req.Token, fence: b.fence, expires: now.Add(req.TTL), meta: req.Meta}
	return driver.Grant{Fence: b.fence}, nil
}

// RenewRW resets the lease of token's hold of name.
func (b *Backend) RenewRW(ctx context.Context, name, token string, ttl time.Duration) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	l := b.rwLocked(name, now)
	defer b.dropIfIdleLocked(name, l)
	e := l.holds[token]
	if e == nil {
		return driver.ErrNotHeld
	}
	e.expires = now.Add(ttl)
	return nil
}

// ReleaseRW frees token's hold of name and wakes name's watchers.
func (b *Backend) ReleaseRW(ctx context.Context, name, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.rwLocked(name, time.Now())
	defer b.dropIfIdleLocked(name, l)
	if l.holds[token] == nil {
		return driver.ErrNotHeld
	}
	delete(l.holds, token)
	b.notifyLocked(rwWatchName(name))
	return nil
}

// DowngradeRW turns token's write hold of name into a read hold and wakes
// name's watchers, the readers among them (driver.RWDowngrader).
func (b *Backend) DowngradeRW(ctx context.Context, name, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.rwLocked(name, time.Now())
	defer b.dropIfIdleLocked(name, l)
	if l.holds[token] == nil {
		return driver.ErrNotHeld
	}
	if l.mode == driver.Exclusive {
		l.mode = driver.Shared // its only hold is token's
		b.notifyLocked(rwWatchName(name))
	}
	return nil
}

// WithdrawIntent removes a waiting writer's intent on name and wakes the
// readers it kept out.
func (b *Backend) WithdrawIntent(ctx context.Context, name, intent string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.rwLocked(name, time.Now())
	defer b.dropIfIdleLocked(name, l)
	if _, ok := l.intents[intent]; ok {
		delete(l.intents, intent)
		b.notifyLocked(rwWatchName(name))
	}
	return nil
}

// InspectRW returns name's mode, live holds by fence and live intents.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.Mode, []driver.Info, int, error) {
	if err := b.check(ctx); err != nil {
		return 0, nil, 0, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.rwLocked(name, now)
	defer b.dropIfIdleLocked(name, l)
	held := make([]driver.Info, 0, len(l.holds))
	for _, e := range l.holds {
		held = append(held, e.info(name, now))
	}
	slices.SortFunc(held, func(a, b driver.Info) int { return cmp.Compare(a.Fence, b.Fence) })
	mode := l.mode
	if len(held) == 0 {
		mode = driver.Shared
	}
	return mode, held, len(l.intents), nil
}

// WatchRW returns a channel that fires when a hold of name is released or
// a writer's intent withdrawn.
func (b *Backend) WatchRW(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.Watch(ctx, rwWatchName(name))
}
