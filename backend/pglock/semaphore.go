package pglock

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/driver"
)

var (
	//go:embed sql/sem_acquire.sql
	semAcquireSQL string
	//go:embed sql/sem_acquire_n.sql
	semAcquireNSQL string
	//go:embed sql/sem_release.sql
	semReleaseSQL string
	//go:embed sql/sem_renew.sql
	semRenewSQL string
	//go:embed sql/sem_set.sql
	semSetSQL string
	//go:embed sql/sem_inspect.sql
	semInspectSQL string
	//go:embed sql/sem_withdraw.sql
	semWithdrawSQL string
)

var (
	_ driver.Semaphores      = (*Backend)(nil)
	_ driver.WeightedPermits = (*Backend)(nil)
)

// semKind names semaphores among the pinned holds.
const semKind = "sem"

// slotKey is the first key of name's permit slots: permit slot i is the
// advisory lock (slotKey, i), the two-key form, which no lock's id (the
// one-key form) can meet. It folds the name's id under the backend's
// namespace to 32 bits, so two names may share their slots: they then
// refuse each other permits at times, never grant too many. 32 bits do not
// resist a search (about 2^32 hashes finds a name sharing a given name's
// slots), so semaphore names must not come from untrusted input.
func (b *Backend) slotKey(name string) int32 {
	return slotKeyOf(b.ID(holdKey(semKind, name)))
}

// slotKeyOf is the slot key of the name whose hold id is id.
func slotKeyOf(id int64) int32 {
	u := uint64(id)
	return int32(uint32(u ^ u>>32))
}

// AcquirePermit makes one attempt to take a permit of req.Key:
// AcquirePermits of one permit, so it waits behind the intents of waiting
// requests too.
func (b *Backend) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	req.Permits = 1
	return b.AcquirePermits(ctx, req, limit)
}

// AcquirePermits makes one attempt to take req.Permits permits of req.Key
// as one hold: that many free slots below limit, all or none, in one
// statement on one session, which also stores limit for a new name,
// refuses a limit that differs from the stored one, and takes nothing while
// a live intent was recorded before req.Intent (any, without one). Refused
// with req.Intent, the statement records it for driver.WriteIntentTTL; a
// grant removes it and wakes the name's waiters (driver.WeightedPermits).
// The session that took the slots is pinned as a lock's is.
func (b *Backend) AcquirePermits(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	if err := b.holds.ClosedError(); err != nil {
		return driver.Grant{}, err
	}
	n := max(req.Permits, 1)
	if n > limit {
		return driver.Grant{}, fmt.Errorf("%w: %d permits in one hold, over the %d of the semaphore", driver.ErrInvalidOption, n, limit)
	}
	req.Permits = n
	meta, err := holdMeta(req.Meta)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("pglock: metadata: %w", err)
	}
	var g driver.Grant
	err = b.withTables(ctx, func() (err error) {
		// Two first uses insert the limit at once: the loser's statement
		// sees no stored limit and takes nothing, and looks again.
		for range 2 {
			if g, err = b.tryPermits(ctx, req, limit, meta); !errors.Is(err, errNoLimit) {
				return err
			}
		}
		return err
	})
	return g, err
}

// errNoLimit marks an attempt that found no stored limit, which another
// first use was inserting.
var errNoLimit = errors.New("no stored limit")

// tryPermits runs one permit statement: for one permit without an intent
// the statement of old, which only looks for live intents besides, else the
// one that takes several slots and keeps intents.
func (b *Backend) tryPermits(ctx context.Context, req driver.AcquireRequest, limit int, meta []byte) (driver.Grant, error) {
	conn, err := b.conn(ctx, &b.poolBound)
	if err != nil {
		return driver.Grant{}, err
	}
	qctx, done := b.reqBound.within(ctx)
	sent := time.Now()
	var (
		stored           *int32
		fence            *int64
		waiting          bool
		ahead, free, ran int64 // ran only makes the statement's unlocks and notice run
	)
	args := []any{b.rowName(req.Key), limit, b.slotKey(req.Key), req.Token, req.TTL.Milliseconds(), meta}
	if req.Permits == 1 && req.Intent == "" {
		err = conn.QueryRow(qctx, semAcquireSQL, args...).Scan(&stored, &fence, &waiting)
	} else {
		args = append(args, req.Permits, req.Intent, driver.WriteIntentTTL.Milliseconds())
		err = conn.QueryRow(qctx, semAcquireNSQL, args...).Scan(&stored, &fence, &ahead, &free, &ran)
	}
	done()
	switch {
	case err != nil:
		destroy(conn) // slots may have been taken: end the session
		return driver.Grant{}, driver.Wrap("pglock", err)
	case fence != nil:
		return b.pinHold(conn, req, semKind, b.ID(holdKey(semKind, req.Key)), *fence, sent)
	}
	conn.Release() // nothing taken, or all given back: the session holds nothing
	switch {
	case stored == nil:
		return driver.Grant{}, driver.Wrap("pglock", errNoLimit)
	case int(*stored) != limit:
		return driver.Grant{}, fmt.Errorf("%w: the semaphore has %d permits, not %d", driver.ErrInvalidOption, *stored, limit)
	case waiting:
		return driver.Grant{}, fmt.Errorf("%w: requests for permits wait", driver.ErrNotAcquired)
	case ahead > 0:
		return driver.Grant{}, fmt.Errorf("%w: %d requests wait ahead", driver.ErrNotAcquired, ahead)
	case req.Permits == 1:
		return driver.Grant{}, fmt.Errorf("%w: all %d permits held", driver.ErrNotAcquired, limit)
	}
	return driver.Grant{}, fmt.Errorf("%w: %d of %d permits free, %d wanted", driver.ErrNotAcquired, free, limit, req.Permits)
}

// WithdrawPermitIntent removes a waiting request's intent on name and, if
// it was live, wakes the requests it kept out.
func (b *Backend) WithdrawPermitIntent(ctx context.Context, name, intent string) error {
	return b.withdraw(ctx, semWithdrawSQL, name, intent)
}

// RenewPermit moves the lease of token's hold of name, all its permits.
func (b *Backend) RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error {
	return b.renewHold(ctx, semKind, name, token, ttl, semRenewSQL)
}

// ReleasePermit unlocks the slots of token's hold and wakes the name's
// waiters (NOTIFY distlock_pg_sem).
func (b *Backend) ReleasePermit(ctx context.Context, name, token string) error {
	return b.releaseHold(ctx, semKind, name, token, semReleaseSQL, func(p *session) []any {
		return []any{slotKeyOf(p.id), b.rowName(name), token, int64(p.Fence)}
	})
}

// SetPermits stores n as name's limit and wakes its waiters.
func (b *Backend) SetPermits(ctx context.Context, name string, n int) error {
	if err := b.holds.ClosedError(); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w: %d permits: want at least 1", driver.ErrInvalidOption, n)
	}
	err := b.withTables(ctx, func() error {
		conn, qctx, done, err := b.pooled(ctx)
		if err != nil {
			return err
		}
		defer done()
		_, err = conn.Exec(qctx, semSetSQL, b.rowName(name), n)
		return err
	})
	if err != nil {
		return driver.Wrap("pglock", err)
	}
	return nil
}

// InspectPermits returns name's stored limit and the holds whose session
// holds their slots, by fence, each with its number of slots as Permits.
func (b *Backend) InspectPermits(ctx context.Context, name string) (int, []driver.Info, error) {
	if err := b.holds.ClosedError(); err != nil {
		return 0, nil, err
	}
	var (
		limit int
		held  []driver.Info
	)
	err := b.withTables(ctx, func() error {
		conn, qctx, done, err := b.pooled(ctx)
		if err != nil {
			return err
		}
		defer done()
		rows, err := conn.Query(qctx, semInspectSQL, b.rowName(name), b.slotKey(name))
		if err != nil {
			return err
		}
		held = held[:0]
		var (
			fence, ttlUS, permits *int64
			meta                  []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&limit, &fence, &meta, &ttlUS, &permits}, func() error {
			if fence == nil {
				return nil // none held
			}
			info := driver.Info{Key: name, Held: true, Fence: uint64(*fence), TTL: max(time.Duration(*ttlUS)*time.Microsecond, 0), Permits: int(*permits)}
			if err := json.Unmarshal(meta, &info.Meta); err != nil {
				return fmt.Errorf("metadata: %w", err)
			}
			held = append(held, info)
			return nil
		})
		return err
	})
	if err != nil {
		return 0, nil, driver.Wrap("pglock", err)
	}
	return limit, held, nil
}

// WatchPermits returns a channel that fires when a permit of name is
// released or its limit changes (LISTEN distlock_pg_sem).
func (b *Backend) WatchPermits(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.watchChannel(ctx, "distlock_pg_sem", name)
}
