package redislock

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.RWLocks      = (*Backend)(nil)
	_ driver.RWDowngrader = (*Backend)(nil)
)

// rwKeysFor maps a read-write lock's name to its Redis names, in the order
// of rwlock.lua's KEYS: prefix + "{" + escaped name + "}:rw", then that
// plus ":holders", ":intents", ":fence" and ":watchers". They share the
// hash tag of the name, so they live in one Cluster slot. A lock's names
// are the tag alone or followed by ":fence", ":meta", ":q", ":qt", ":qm" or
// ":watchers", a semaphore's by ":sem" and more, so none is ever a lock's or
// a semaphore's, and List never finds a read-write lock.
func (b *Backend) rwKeysFor(name string) []string {
	base := b.prefix + "{" + escapeKey(name) + "}:rw"
	return []string{base, base + ":holders", base + ":intents", base + ":fence", base + ":watchers"}
}

// AcquireRW makes one attempt to take req.Key in mode for req.Token, in one
// script on the server's clock: it drops the expired holds and intents,
// returns the grant of a token that holds the name already, and grants a
// shared hold while no exclusive hold and no intent is live, an exclusive
// one while no hold is live, with the fence counter advanced to
// max(last+1, server time in µs) as a lock's. A refused exclusive attempt
// with req.Intent records it for driver.WriteIntentTTL; a granted one
// removes it.
func (b *Backend) AcquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (driver.Grant, error) {
	fence, err := b.acquireRW(ctx, req, mode)
	if err != nil {
		return driver.Grant{}, driver.Wrap("redislock", err)
	}
	return driver.Grant{Fence: fence}, nil
}

func (b *Backend) acquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (uint64, error) {
	if err := validRequest(req.Key, req.Token, &req.TTL); err != nil {
		return 0, err
	}
	if mode != driver.Shared && mode != driver.Exclusive {
		return 0, fmt.Errorf("%w: mode %d", driver.ErrInvalidOption, mode)
	}
	meta, err := encodeMeta(req.Meta)
	if err != nil {
		return 0, err
	}
	r, err := b.evalSem(ctx, rwAcquire, b.rwKeysFor(req.Key), req.Token, millis(req.TTL), mode.String(), req.Intent, meta,
		millis(driver.WriteIntentTTL))
	switch {
	case err != nil:
		return 0, err
	case len(r) == 2 && r[0] == "granted":
		return strconv.ParseUint(r[1], 10, 64)
	case len(r) == 4 && r[0] == "held":
		return 0, fmt.Errorf("%w: held %s by %s, %s writers waiting", driver.ErrNotAcquired, r[1], r[2], r[3])
	}
	return 0, semReplyErr(r)
}

// RenewRW resets the time to live of token's hold of name to ttl, and
// keeps the fence counter at least a minute beyond it.
func (b *Backend) RenewRW(ctx context.Context, name, token string, ttl time.Duration) error {
	if err := validRequest(name, token, &ttl); err != nil {
		return driver.Wrap("redislock", err)
	}
	r, err := b.evalSem(ctx, semRenew, b.rwKeysFor(name), token, millis(ttl))
	return semDone(r, err)
}

// ReleaseRW frees token's hold of name and, in the same script, publishes
// a notice to every backend that watches the name (WatchRW).
func (b *Backend) ReleaseRW(ctx context.Context, name, token string) error {
	if err := validRequest(name, token, nil); err != nil {
		return driver.Wrap("redislock", err)
	}
	r, err := b.evalSem(ctx, semRelease, b.rwKeysFor(name), token, b.channels)
	return semDone(r, err)
}

// WithdrawIntent removes a waiting writer's intent on name and, if it was
// there, wakes name's watchers in the same script.
func (b *Backend) WithdrawIntent(ctx context.Context, name, intent string) error {
	err := driver.ValidateKey(name)
	if err == nil {
		var r []string
		r, err = b.evalSem(ctx, rwWithdraw, b.rwKeysFor(name), intent, b.channels)
		if err == nil && (len(r) != 1 || r[0] != "1") {
			err = semReplyErr(r)
		}
	}
	if err != nil {
		return driver.Wrap("redislock", err)
	}
	return nil
}

// DowngradeRW turns token's exclusive hold of name into a shared one of the
// same fence, expiry and metadata and, in the same script, wakes name's
// watchers: readers the hold kept out may join it, while writers still find
// a live hold. A shared hold is left as it is (driver.RWDowngrader).
func (b *Backend) DowngradeRW(ctx context.Context, name, token string) error {
	if err := validRequest(name, token, nil); err != nil {
		return driver.Wrap("redislock", err)
	}
	r, err := b.evalSem(ctx, rwDowngrade, b.rwKeysFor(name), token, b.channels)
	return semDone(r, err)
}

// InspectRW returns name's live holds by fence, with their time to live
// left and metadata, the mode they are held in (Shared if none), and the
// number of live intents.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.Mode, []driver.Info, int, error) {
	mode, held, intents, err := b.inspectRW(ctx, name)
	if err != nil {
		return 0, nil, 0, driver.Wrap("redislock", err)
	}
	return mode, held, intents, nil
}

func (b *Backend) inspectRW(ctx context.Context, name string) (driver.Mode, []driver.Info, int, error) {
	if err := driver.ValidateKey(name); err != nil {
		return 0, nil, 0, err
	}
	r, err := b.evalSem(ctx, rwInspect, b.rwKeysFor(name))
	if err != nil {
		return 0, nil, 0, err
	}
	if len(r) < 2 || (r[0] != driver.Shared.String() && r[0] != driver.Exclusive.String()) {
		return 0, nil, 0, semReplyErr(r)
	}
	intents, err := strconv.Atoi(r[1])
	if err != nil {
		return 0, nil, 0, fmt.Errorf("intents: %w", err)
	}
	held, err := parseHolds(name, r[2:], false)
	if err != nil {
		return 0, nil, 0, err
	}
	mode := driver.Shared
	if r[0] == driver.Exclusive.String() {
		mode = driver.Exclusive
	}
	return mode, held, intents, nil
}

// WatchRW returns a channel that fires when a hold of name is released or
// an intent withdrawn, as WatchPermits does for a semaphore: the watch
// enters itself in the lock's watchers, which the release and withdraw
// scripts notify on the watching backend's channel. A hold whose holder
// vanished, or an intent that lapsed, frees no notice: the caller's poll
// finds it.
func (b *Backend) WatchRW(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.watchKeys(ctx, name, b.rwKeysFor(name)[4])
}
