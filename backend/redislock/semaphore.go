package redislock

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/distlock/distlock/driver"
)

var (
	_ driver.Semaphores      = (*Backend)(nil)
	_ driver.WeightedPermits = (*Backend)(nil)
)

// semKeysFor maps a semaphore name to its Redis names, in the order of
// semaphore.lua's KEYS: prefix + "{" + escaped name + "}:sem", then that
// plus ":holders", ":limit", ":fence", ":watchers", ":weights", ":intents"
// and ":lapses". They share the hash tag of the name, so they live in one
// Cluster slot. A lock's names are the same tag alone or followed by
// ":fence", ":meta", ":q", ":qt", ":qm" or ":watchers", so no semaphore
// name is ever a lock's, and List, which looks for names that end with the
// tag, never finds a semaphore.
func (b *Backend) semKeysFor(name string) []string {
	base := b.prefix + "{" + escapeKey(name) + "}:sem"
	return []string{base, base + ":holders", base + ":limit", base + ":fence", base + ":watchers",
		base + ":weights", base + ":intents", base + ":lapses"}
}

// AcquirePermit takes a permit of req.Key for req.Token: AcquirePermits of
// one permit, so it waits behind the intents of waiting requests too.
func (b *Backend) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	req.Permits = 1
	return b.AcquirePermits(ctx, req, limit)
}

// AcquirePermits takes req.Permits permits of req.Key as one hold of
// req.Token, in one script on the server's clock: it drops the expired
// holds and lapsed intents, stores limit if the name has none (or fails
// with driver.ErrInvalidOption naming both if it has another), returns the
// grant of a token that holds already, and grants the hold if the live
// holds' permits and its own are at most the limit and no live intent was
// recorded before req.Intent (none at all without one), with the fence
// counter advanced to max(last+1, server time in µs) as a lock's. Refused
// with req.Intent, it records the intent for driver.WriteIntentTTL; a
// grant removes it and wakes the name's watchers.
func (b *Backend) AcquirePermits(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	fence, err := b.acquirePermits(ctx, req, limit)
	if err != nil {
		return driver.Grant{}, driver.Wrap("redislock", err)
	}
	return driver.Grant{Fence: fence}, nil
}

func (b *Backend) acquirePermits(ctx context.Context, req driver.AcquireRequest, limit int) (uint64, error) {
	if err := validRequest(req.Key, req.Token, &req.TTL); err != nil {
		return 0, err
	}
	if err := validPermits(limit); err != nil {
		return 0, err
	}
	n := max(req.Permits, 1)
	if n > limit {
		return 0, fmt.Errorf("%w: %d permits in one hold, over the %d of the semaphore", driver.ErrInvalidOption, n, limit)
	}
	meta, err := encodeMeta(req.Meta)
	if err != nil {
		return 0, err
	}
	r, err := b.evalSem(ctx, semAcquire, b.semKeysFor(req.Key), req.Token, millis(req.TTL), strconv.Itoa(limit), meta,
		strconv.Itoa(n), req.Intent, millis(driver.WriteIntentTTL), b.channels)
	switch {
	case err != nil:
		return 0, err
	case len(r) == 2 && r[0] == "granted":
		return strconv.ParseUint(r[1], 10, 64)
	case len(r) == 2 && r[0] == "limit":
		return 0, fmt.Errorf("%w: the semaphore has %s permits, not %d", driver.ErrInvalidOption, r[1], limit)
	case len(r) == 5 && r[0] == "full":
		return 0, fmt.Errorf("%w: %s of %s permits held, %s wanted, %s requests waiting", driver.ErrNotAcquired, r[1], r[2], r[3], r[4])
	}
	return 0, semReplyErr(r)
}

// WithdrawPermitIntent removes a waiting request's intent on name and, if
// it was there, wakes name's watchers in the same script.
func (b *Backend) WithdrawPermitIntent(ctx context.Context, name, intent string) error {
	err := driver.ValidateKey(name)
	if err == nil {
		var r []string
		r, err = b.evalSem(ctx, semWithdraw, b.semKeysFor(name), intent, b.channels)
		if err == nil && (len(r) != 1 || r[0] != "1") {
			err = semReplyErr(r)
		}
	}
	if err != nil {
		return driver.Wrap("redislock", err)
	}
	return nil
}

// RenewPermit resets the time to live of token's hold of name, of however
// many permits, to ttl, and keeps the fence counter at least a minute
// beyond it.
func (b *Backend) RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error {
	if err := validRequest(name, token, &ttl); err != nil {
		return driver.Wrap("redislock", err)
	}
	r, err := b.evalSem(ctx, semRenew, b.semKeysFor(name), token, millis(ttl))
	return semDone(r, err)
}

// ReleasePermit frees token's hold of name, all its permits, and, in the
// same script, publishes a notice to every backend that watches the name
// (WatchPermits).
func (b *Backend) ReleasePermit(ctx context.Context, name, token string) error {
	if err := validRequest(name, token, nil); err != nil {
		return driver.Wrap("redislock", err)
	}
	r, err := b.evalSem(ctx, semRelease, b.semKeysFor(name), token, b.channels)
	return semDone(r, err)
}

// semDone reads the reply of a script that answers {'1'} or {'0'}: done, or
// not held.
func semDone(r []string, err error) error {
	switch {
	case err == nil && len(r) == 1 && r[0] == "1":
		return nil
	case err == nil && len(r) == 1 && r[0] == "0":
		err = driver.ErrNotHeld
	case err == nil:
		err = semReplyErr(r)
	}
	return driver.Wrap("redislock", err)
}

// SetPermits stores n as name's limit and wakes its watchers, who may now
// find room.
func (b *Backend) SetPermits(ctx context.Context, name string, n int) error {
	err := driver.ValidateKey(name)
	if err == nil {
		err = validPermits(n)
	}
	if err != nil {
		return driver.Wrap("redislock", err)
	}
	r, err := b.evalSem(ctx, semSetPermits, b.semKeysFor(name), strconv.Itoa(n), b.channels)
	return semDone(r, err)
}

func validPermits(n int) error {
	if n < 1 {
		return fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, n)
	}
	return nil
}

// InspectPermits returns name's stored limit (0 if none) and its live
// holds, by fence, with their time to live left, metadata and permits.
func (b *Backend) InspectPermits(ctx context.Context, name string) (int, []driver.Info, error) {
	limit, held, err := b.inspectPermits(ctx, name)
	if err != nil {
		return 0, nil, driver.Wrap("redislock", err)
	}
	return limit, held, nil
}

func (b *Backend) inspectPermits(ctx context.Context, name string) (int, []driver.Info, error) {
	if err := driver.ValidateKey(name); err != nil {
		return 0, nil, err
	}
	r, err := b.evalSem(ctx, semInspect, b.semKeysFor(name))
	if err != nil {
		return 0, nil, err
	}
	if len(r) < 1 {
		return 0, nil, semReplyErr(r)
	}
	limit, err := strconv.Atoi(r[0])
	if err != nil {
		return 0, nil, fmt.Errorf("limit: %w", err)
	}
	held, err := parseHolds(name, r[1:], true)
	if err != nil {
		return 0, nil, err
	}
	return limit, held, nil
}

// WatchPermits returns a channel that fires when a permit of name is
// released or its limit changes, over the backend's one subscription: the
// watch enters "<backend id>|<watch token>" in the semaphore's watchers,
// and the release and set-permits scripts publish the watch token on this
// backend's channel. The entry expires after the waiter timeout
// (WithWaiterTimeout) unless refreshed, which the watch does every fifth to
// third of it until stop or ctx ends: a watching process that died is
// dropped. The channel also fires when the subscription is confirmed or
// lost, since a notice may have been missed. A permit whose holder vanished
// frees no notice: the caller's poll finds it.
func (b *Backend) WatchPermits(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.watchKeys(ctx, name, b.semKeysFor(name)[4])
}

// parseHolds reads the holds of name that an inspect script reports, as
// fence, ms to live, metadata JSON ("" if none) and, if withPermits, the
// hold's permits each, and returns them by fence.
func parseHolds(name string, p []string, withPermits bool) ([]driver.Info, error) {
	fields := 3
	if withPermits {
		fields = 4
	}
	if len(p)%fields != 0 {
		return nil, semReplyErr(p)
	}
	held := make([]driver.Info, 0, len(p)/fields)
	for ; len(p) > 0; p = p[fields:] {
		info := driver.Info{Key: name, Held: true}
		var err error
		if info.Fence, err = strconv.ParseUint(p[0], 10, 64); err != nil {
			return nil, fmt.Errorf("fence: %w", err)
		}
		ms, err := strconv.ParseInt(p[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("time to live: %w", err)
		}
		info.TTL = time.Duration(ms) * time.Millisecond
		if p[2] != "" {
			if err := json.Unmarshal([]byte(p[2]), &info.Meta); err != nil {
				return nil, fmt.Errorf("metadata: %w", err)
			}
		}
		if withPermits {
			if info.Permits, err = strconv.Atoi(p[3]); err != nil {
				return nil, fmt.Errorf("permits: %w", err)
			}
		}
		held = append(held, info)
	}
	slices.SortFunc(held, func(a, b driver.Info) int { return cmp.Compare(a.Fence, b.Fence) })
	return held, nil
}
