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
	_ driver.Semaphores      = (*Backend)(nil)
	_ driver.WeightedPermits = (*Backend)(nil)
)

// semaphore is a semaphore's state: its limit, its holds by token, and the
// intents of the requests that wait, in the order they began waiting.
type semaphore struct {
	limit   int
	permits map[string]*entry
	intents []permitIntent
}

// permitIntent is a waiting request's place in line, until expires.
type permitIntent struct {
	id      string
	expires time.Time
}

// watchName is the watchers' name of semaphore name's releases: never a
// lock's key, which cannot begin with a NUL byte.
func watchName(name string) string { return "\x00sem\x00" + name }

// liveLocked drops s's expired permits and intents.
func (s *semaphore) liveLocked(now time.Time) {
	maps.DeleteFunc(s.permits, func(_ string, e *entry) bool { return !now.Before(e.expires) })
	s.intents = slices.DeleteFunc(s.intents, func(i permitIntent) bool { return !now.Before(i.expires) })
}

// heldLocked is the number of permits s's holds count.
func (s *semaphore) heldLocked() int {
	n := 0
	for _, e := range s.permits {
		n += max(e.permits, 1)
	}
	return n
}

// AcquirePermit takes a permit of req.Key if one is free and no request
// waits (AcquirePermits of one permit).
func (b *Backend) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	req.Permits = 1
	return b.AcquirePermits(ctx, req, limit)
}

// AcquirePermits takes req.Permits permits of req.Key as one hold if they
// are free and no earlier request waits; refused, it records req.Intent.
func (b *Backend) AcquirePermits(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	if err := b.check(ctx); err != nil {
		return driver.Grant{}, err
	}
	n := max(req.Permits, 1)
	if n > limit {
		return driver.Grant{}, fmt.Errorf("%w: %d permits in one hold, over the %d of the semaphore", driver.ErrInvalidOption, n, limit)
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sems[req.Key]
	if s == nil {
		s = &semaphore{limit: limit, permits: make(map[string]*entry)}
		b.sems[req.Key] = s
	}
	if s.limit != limit {
		return driver.Grant{}, fmt.Errorf("%w: the semaphore has %d permits, not %d", driver.ErrInvalidOption, s.limit, limit)
	}
	s.liveLocked(now)
	if e := s.permits[req.Token]; e != nil {
		return driver.Grant{Fence: e.fence}, nil // a retried request that already won
	}
	place := slices.IndexFunc(s.intents, func(i permitIntent) bool { return i.id == req.Intent })
	first := len(s.intents) == 0 || (req.Intent != "" && place == 0)
	if held := s.heldLocked(); held+n > s.limit || !first {
		if req.Intent != "" {
			if place < 0 {
				place = len(s.intents)
				s.intents = append(s.intents, permitIntent{id: req.Intent})
			}
			s.intents[place].expires = now.Add(driver.WriteIntentTTL)
		}
		return driver.Grant{}, fmt.Errorf("%w: %d of %d permits held, %d wanted, %d requests waiting",
			driver.ErrNotAcquired, held, s.limit, n, len(s.intents))
	}
	if place >= 0 {
		s.intents = slices.Delete(s.intents, place, place+1)
		b.notifyLocked(watchName(req.Key)) // the next in line may fit now
	}
	b.fence++
	s.permits[req.Token] = &entry{token: req.Token, fence: b.fence, expires: now.Add(req.TTL), meta: req.Meta, permits: req.Permits}
	return driver.Grant{Fence: b.fence}, nil
}

// WithdrawPermitIntent removes a waiting request's intent on name and
// wakes the requests it kept out.
func (b *Backend) WithdrawPermitIntent(ctx context.Context, name, intent string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sems[name]
	if s == nil {
		return nil
	}
	if i := slices.IndexFunc(s.intents, func(i permitIntent) bool { return i.id == intent }); i >= 0 {
		s.intents = slices.Delete(s.intents, i, i+1)
		b.notifyLocked(watchName(name))
	}
	return nil
}

// permitLocked returns token's live permit of name, or nil.
func (b *store) permitLocked(name, token string, now time.Time) *entry {
	s := b.sems[name]
	if s == nil {
		return nil
	}
	s.liveLocked(now)
	return s.permits[token]
}

// RenewPermit resets the lease of token's permit of name.
func (b *Backend) RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.permitLocked(name, token, now)
	if e == nil {
		return driver.ErrNotHeld
	}
	e.expires = now.Add(ttl)
	return nil
}

// ReleasePermit frees token's permit of name and wakes name's watchers.
func (b *Backend) ReleasePermit(ctx context.Context, name, token string) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.permitLocked(name, token, time.Now()) == nil {
		return driver.ErrNotHeld
	}
	delete(b.sems[name].permits, token)
	b.notifyLocked(watchName(name))
	return nil
}

// SetPermits stores n as name's limit and wakes its watchers, who may now
// find room.
func (b *Backend) SetPermits(ctx context.Context, name string, n int) error {
	if err := b.check(ctx); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, n)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sems[name]
	if s == nil {
		s = &semaphore{permits: make(map[string]*entry)}
		b.sems[name] = s
	}
	s.limit = n
	b.notifyLocked(watchName(name))
	return nil
}

// InspectPermits returns name's limit and live permits, by fence.
func (b *Backend) InspectPermits(ctx context.Context, name string) (int, []driver.Info, error) {
	if err := b.check(ctx); err != nil {
		return 0, nil, err
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.sems[name]
	if s == nil {
		return 0, nil, nil
	}
	s.liveLocked(now)
	held := make([]driver.Info, 0, len(s.permits))
	for _, e := range s.permits {
		held = append(held, e.info(name, now))
	}
	slices.SortFunc(held, func(a, b driver.Info) int { return cmp.Compare(a.Fence, b.Fence) })
	return s.limit, held, nil
}

// WatchPermits returns a channel that fires when a permit of name is
// released or its limit changes.
func (b *Backend) WatchPermits(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.Watch(ctx, watchName(name))
}
