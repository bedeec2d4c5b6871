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
	//go:embed sql/rw_acquire_shared.sql
	rwAcquireSharedSQL string
	//go:embed sql/rw_acquire_exclusive.sql
	rwAcquireExclusiveSQL string
	//go:embed sql/rw_release.sql
	rwReleaseSQL string
	//go:embed sql/rw_renew.sql
	rwRenewSQL string
	//go:embed sql/rw_withdraw.sql
	rwWithdrawSQL string
	//go:embed sql/rw_inspect.sql
	rwInspectSQL string
	//go:embed sql/rw_downgrade.sql
	rwDowngradeSQL string
)

var (
	_ driver.RWLocks      = (*Backend)(nil)
	_ driver.RWDowngrader = (*Backend)(nil)
)

// rwKind names read-write locks among the pinned holds.
const rwKind = "rw"

// AcquireRW makes one attempt to take name req.Key in mode: the name's
// advisory lock (the id a lock of the same name uses) taken shared by a
// reader, unless a live write intent exists, or exclusively by a writer,
// which records intent when refused (driver.RWLocks). The session that took
// it is pinned as a lock's is.
func (b *Backend) AcquireRW(ctx context.Context, req driver.AcquireRequest, mode driver.Mode) (driver.Grant, error) {
	if err := b.holds.ClosedError(); err != nil {
		return driver.Grant{}, err
	}
	meta, err := holdMeta(req.Meta)
	if err != nil {
		return driver.Grant{}, fmt.Errorf("pglock: metadata: %w", err)
	}
	var g driver.Grant
	err = b.withTables(ctx, func() (err error) {
		id := b.ID(req.Key) // the key-id scheme is known from here
		q, args := rwAcquireSharedSQL, []any{id, b.rowName(req.Key), req.Token, req.TTL.Milliseconds(), meta}
		if mode == driver.Exclusive {
			q, args = rwAcquireExclusiveSQL, append(args, req.Intent, driver.WriteIntentTTL.Milliseconds())
		}
		g, err = b.tryHold(ctx, req, rwKind, id, q, args...)
		return err
	})
	return g, err
}

// RenewRW moves the lease of token's hold of name.
func (b *Backend) RenewRW(ctx context.Context, name, token string, ttl time.Duration) error {
	return b.renewHold(ctx, rwKind, name, token, ttl, rwRenewSQL)
}

// ReleaseRW unlocks token's hold of name in its mode, deletes its row and
// wakes the name's waiters (NOTIFY distlock_pg_rw).
func (b *Backend) ReleaseRW(ctx context.Context, name, token string) error {
	return b.releaseHold(ctx, rwKind, name, token, rwReleaseSQL, func(p *session) []any { return []any{p.id, b.rowName(name), token} })
}

// DowngradeRW turns token's exclusive hold of name into a shared one in one
// statement on its pinned session: the session takes the name's advisory
// lock shared beside its exclusive lock, then unlocks the exclusive one, so
// no other session's writer gets in between; the hold's row turns shared,
// with its fence, lease and metadata, and the name's waiters are woken
// (NOTIFY distlock_pg_rw). A shared hold is left as it is. Advisory locks
// are not undone with a failed statement, so a statement that fails leaves
// the hold in a mode it cannot know: the session is then ended, which frees
// the hold and reports it lost (driver.RWDowngrader).
func (b *Backend) DowngradeRW(ctx context.Context, name, token string) error {
	if err := b.holds.ClosedError(); err != nil {
		return err
	}
	p := b.holds.Lookup(holdKey(rwKind, name), token)
	if p == nil {
		return driver.ErrNotHeld
	}
	if err := p.Lock(ctx); err != nil {
		return driver.Wrap("pglock", err)
	}
	defer p.Unlock()
	if p.Ended() || !time.Now().Before(p.Deadline()) {
		return driver.ErrNotHeld // a lapsed lease is unlocked by the next keepalive round
	}
	// Not cancelled midway: pgx would close the connection, and the hold.
	qctx, done := b.reqBound.within(context.WithoutCancel(ctx))
	defer done()
	var shared bool
	err := p.conn.QueryRow(qctx, rwDowngradeSQL, p.id, b.rowName(name), token).Scan(&shared)
	switch {
	case err == nil && shared:
		return nil
	case errors.Is(err, pgx.ErrNoRows): // nothing ran
		return errors.New("pglock: the hold has no row: it stays exclusive")
	}
	closed := p.conn.Conn().IsClosed()
	p.DieLocked()
	switch {
	case err == nil:
		return fmt.Errorf("%w: the session did not hold it exclusively", driver.ErrNotHeld)
	case closed:
		return fmt.Errorf("%w: the session ended: %w", driver.ErrNotHeld, err)
	}
	return fmt.Errorf("%w; the session is ended, which frees the hold", driver.Wrap("pglock", err))
}

// WithdrawIntent removes a waiting writer's intent on name and, if it was
// live, wakes the readers it kept out.
func (b *Backend) WithdrawIntent(ctx context.Context, name, intent string) error {
	return b.withdraw(ctx, rwWithdrawSQL, name, intent)
}

// withdraw runs sql, the withdrawal of a read-write lock's or a
// semaphore's intent, with name's row name and intent, on a pooled
// connection.
func (b *Backend) withdraw(ctx context.Context, sql, name, intent string) error {
	if err := b.holds.ClosedError(); err != nil {
		return err
	}
	err := b.withTables(ctx, func() error {
		conn, qctx, done, err := b.pooled(ctx)
		if err != nil {
			return err
		}
		defer done()
		_, err = conn.Exec(qctx, sql, b.rowName(name), intent)
		return err
	})
	if err != nil {
		return driver.Wrap("pglock", err)
	}
	return nil
}

// InspectRW returns the holds of name whose session holds its advisory
// lock in their mode, by fence, and the number of live write intents.
func (b *Backend) InspectRW(ctx context.Context, name string) (driver.Mode, []driver.Info, int, error) {
	if err := b.holds.ClosedError(); err != nil {
		return 0, nil, 0, err
	}
	mode, intents := driver.Shared, 0
	var held []driver.Info
	err := b.withTables(ctx, func() error {
		conn, qctx, done, err := b.pooled(ctx)
		if err != nil {
			return err
		}
		defer done()
		rows, err := conn.Query(qctx, rwInspectSQL, b.ID(name), b.rowName(name))
		if err != nil {
			return err
		}
		held = held[:0]
		var (
			shared       *bool
			fence, ttlUS *int64
			meta         []byte
		)
		_, err = pgx.ForEachRow(rows, []any{&shared, &fence, &meta, &ttlUS, &intents}, func() error {
			if shared == nil {
				return nil // nothing held
			}
			if !*shared {
				mode = driver.Exclusive
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
		return 0, nil, 0, driver.Wrap("pglock", err)
	}
	return mode, held, intents, nil
}

// WatchRW returns a channel that fires when a hold of name is released or
// a writer's intent on it withdrawn (LISTEN distlock_pg_rw).
func (b *Backend) WatchRW(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.watchChannel(ctx, "distlock_pg_rw", name)
}
