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
	//go:embed sql/sem_release.sql
	semReleaseSQL string
	//go:embed sql/sem_renew.sql
	semRenewSQL string
	//go:embed sql/sem_set.sql
	semSetSQL string
	//go:embed sql/sem_inspect.sql
	semInspectSQL string
)

var _ driver.Semaphores = (*Backend)(nil)

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

// AcquirePermit makes one attempt to take a permit of req.Key: the first
// free slot below limit, in one statement that also stores limit for a new
// name and refuses a limit that differs from the stored one
// (driver.Semaphores). The session that took it is pinned as a lock's is.
func (b *Backend) AcquirePermit(ctx context.Context, req driver.AcquireRequest, limit int) (driver.Grant, error) {
	if err := b.holds.ClosedError(); err != nil {
		return driver.Grant{}, err
	}
	meta, err := holdMeta(req.Meta)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("pglock: metadata: %w", err)
	}
	var g driver.Grant
	err = b.withTables(ctx, func() (err error) {
		// Two first uses insert the limit at once: the loser's statement
		// sees no stored limit and takes nothing, and looks again.
		for range 2 {
			if g, err = b.tryPermit(ctx, req, limit, meta); !errors.Is(err, errNoLimit) {
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

// tryPermit runs one permit statement.
func (b *Backend) tryPermit(ctx context.Context, req driver.AcquireRequest, limit int, meta []byte) (driver.Grant, error) {
	conn, err := b.conn(ctx, &b.poolBound)
	if err != nil {
		return driver.Grant{}, err
	}
	qctx, done := b.reqBound.within(ctx)
	sent := time.Now()
	var (
		stored *int32
		fence  *int64
	)
	err = conn.QueryRow(qctx, semAcquireSQL, b.rowName(req.Key), limit, b.slotKey(req.Key), req.Token, req.TTL.Milliseconds(), meta).Scan(&stored, &fence)
	done()
	switch {
	case err != nil:
		destroy(conn) // a permit may have been taken: end the session
		return driver.Grant{}, driver.Wrap("pglock", err)
	case fence != nil:
		return b.pinHold(conn, req, semKind, b.ID(holdKey(semKind, req.Key)), *fence, sent)
	}
	conn.Release() // nothing taken: the session holds nothing
	switch {
	case stored == nil:
		return driver.Grant{}, driver.Wrap("pglock", errNoLimit)
	case int(*stored) != limit:
		return driver.Grant{}, fmt.Errorf("%w: the semaphore has %d permits, not %d", driver.ErrInvalidOption, *stored, limit)
	}
	return driver.Grant{}, fmt.Errorf("%w: all %d permits held", driver.ErrNotAcquired, limit)
}

// RenewPermit moves the lease of token's permit of name.
func (b *Backend) RenewPermit(ctx context.Context, name, token string, ttl time.Duration) error {
	return b.renewHold(ctx, semKind, name, token, ttl, semRenewSQL)
}

// ReleasePermit unlocks token's permit slot and wakes the name's waiters
// (NOTIFY distlock_pg_sem).
func (b *Backend) ReleasePermit(ctx context.Context, name, token string) error {
	return b.releaseHold(ctx, semKind, name, token, semReleaseSQL, func(p *session) []any { return []any{slotKeyOf(p.id), b.rowName(name), token} })
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

// InspectPermits returns name's stored limit and the permits whose session
// holds their slot, by fence.
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
			fence, ttlUS *int64
			meta         []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&limit, &fence, &meta, &ttlUS}, func() error {
			if fence == nil {
				return nil // none held
			}
			info := driver.Info{Key: name, Held: true, Fence: uint64(*fence), TTL: max(time.Duration(*ttlUS)*time.Microsecond, 0)}
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
