package mysqllock

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/keyrange"
)

// Renew confirms that the pinned session of token is alive and moves the
// lease to ttl from now, in the holder record too. The named lock lives as
// long as the session.
func (b *Backend) Renew(ctx context.Context, key, token string, ttl time.Duration) error {
	if err := b.holds.ClosedError(); err != nil {
		return err
	}
	p := b.holds.Lookup(key, token)
	if p == nil {
		return driver.ErrNotHeld
	}
	return p.Renew(ctx, ttl)
}

// Release frees key (RELEASE_LOCK) if token holds it through this backend,
// and returns its connection to the pool, or closes it if the release failed.
// A renewal or keepalive in flight on the connection finishes first.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	if err := b.holds.Enter(); err != nil {
		return err
	}
	defer b.holds.Leave()
	p := b.holds.Lookup(key, token)
	if p == nil {
		return driver.ErrNotHeld
	}
	return p.Release(ctx)
}

// record is a row of the holder table as Inspect, List and ForceRelease read it.
type record struct {
	fence                   int64
	owner, business, labels string
	ttlUS                   int64
}

// info is the hold of key that r describes.
func (r record) info(key string) (driver.Info, error) {
	info := driver.Info{Key: key, Held: true, Fence: uint64(r.fence), TTL: max(time.Duration(r.ttlUS)*time.Microsecond, 0),
		Meta: driver.Meta{Owner: r.owner, BusinessID: r.business}}
	if r.labels != "{}" && r.labels != "" {
		if err := json.Unmarshal([]byte(r.labels), &info.Meta.Labels); err != nil {
			return driver.Info{}, fmt.Errorf("labels: %w", err)
		}
	}
	return info, nil
}

// state is what the server says of a key: whether a session holds its named
// lock (and which), and the holder row if that session wrote it.
type state struct {
	held, current bool
	holder        uint64
	rec           record
}

// inspect reads key's state.
func (b *Backend) inspect(ctx context.Context, key string) (state, error) {
	var s state
	qctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	name := LockName(key)
	err := b.db.QueryRowContext(qctx, inspectSQL, name, name).Scan(&s.held, &s.current, &s.rec.fence,
		&s.rec.owner, &s.rec.business, &s.rec.labels, &s.rec.ttlUS, &s.holder)
	return s, err
}

// Inspect reports whether any session holds key's named lock (IS_USED_LOCK)
// and, if it was taken through mysqllock, its fence, time to live and
// metadata from the holder record. A free key reports the fence of its last
// grant while its row remains. A lock taken on key's name outside mysqllock
// (SELECT GET_LOCK(LockName(key), ...)) is reported held, without the rest.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.holds.Enter(); err != nil {
		return driver.Info{}, err
	}
	defer b.holds.Leave()
	if err := b.ensureSchema(ctx); err != nil {
		return driver.Info{}, err
	}
	s, err := b.inspect(ctx, key)
	if err != nil {
		return driver.Info{}, driver.Wrap("mysqllock", err)
	}
	switch {
	case s.held && s.current:
		info, err := s.rec.info(key)
		if err != nil {
			return driver.Info{}, driver.Wrap("mysqllock", err)
		}
		return info, nil
	case s.held:
		return driver.Info{Key: key, Held: true}, nil
	}
	return driver.Info{Key: key, Fence: uint64(s.rec.fence)}, nil
}

// List returns the locks taken through mysqllock whose keys start with
// prefix and whose session still holds them, sorted by key. It reads every
// row of the holder table whose key starts with prefix.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	return b.list(ctx, listSQL, prefix, prefix)
}

// ListPage returns, sorted by key byte for byte, at most limit of the locks
// List would return whose keys sort after after. It reads the rows of the
// holder table from an index of their keys (VARBINARY, in byte order) from
// after (or prefix) on, until the page holds limit rows whose session holds
// the lock, or the prefix's keys end: a page of rows, plus those of released
// keys in between.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit)
	}
	return b.list(ctx, listPageSQL, after, prefix, keyrange.End(prefix), prefix, prefix, limit)
}

// list returns the holders that q, a listing statement, reads with args.
func (b *Backend) list(ctx context.Context, q string, args ...any) ([]driver.Info, error) {
	if err := b.holds.Enter(); err != nil {
		return nil, err
	}
	defer b.holds.Leave()
	if err := b.ensureSchema(ctx); err != nil {
		return nil, err
	}
	qctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	rows, err := b.db.QueryContext(qctx, q, args...)
	if err != nil {
		return nil, driver.Wrap("mysqllock", err)
	}
	defer rows.Close()
	var infos []driver.Info
	for rows.Next() {
		var (
			key []byte
			r   record
		)
		if err := rows.Scan(&key, &r.fence, &r.owner, &r.business, &r.labels, &r.ttlUS); err != nil {
			return nil, driver.Wrap("mysqllock", err)
		}
		info, err := r.info(string(key))
		if err != nil {
			return nil, driver.Wrap("mysqllock", err)
		}
		infos = append(infos, info)
	}
	if err := rows.Err(); err != nil {
		return nil, driver.Wrap("mysqllock", err)
	}
	return infos, nil
}

// ForceRelease frees key whoever holds it, for operators. A named lock
// belongs to its session and only ending that session frees it, so
// ForceRelease ends the session holding key's lock (KILL CONNECTION), waits
// until the lock is free, and returns what the holder record said of the
// hold (only Held for a lock taken outside mysqllock). Everything else that
// session did ends with it. A mysqllock holder learns of it at its next
// keepalive or renewal, which then returns driver.ErrNotHeld.
//
// It needs WithKillOnForceRelease(true), else it returns an error matching
// errors.ErrUnsupported that says why. If no session holds key it returns an
// error matching driver.ErrNotHeld and ends nothing.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	if err := b.holds.Enter(); err != nil {
		return driver.Info{}, err
	}
	defer b.holds.Leave()
	if err := driver.ValidateKey(key); err != nil {
		return driver.Info{}, err
	}
	if !b.opts.killOnForce {
		return driver.Info{}, fmt.Errorf("mysqllock: %w: a named lock belongs to the session holding it and only ending that session frees it; allow that with WithKillOnForceRelease(true) (URL parameter kill_on_force_release=true)",
			errors.ErrUnsupported)
	}
	if err := b.ensureSchema(ctx); err != nil {
		return driver.Info{}, err
	}
	s, err := b.inspect(ctx, key)
	if err != nil {
		return driver.Info{}, driver.Wrap("mysqllock", err)
	}
	if !s.held {
		return driver.Info{}, driver.ErrNotHeld
	}
	info := driver.Info{Key: key, Held: true}
	if s.current {
		if info, err = s.rec.info(key); err != nil {
			return driver.Info{}, driver.Wrap("mysqllock", err)
		}
	}
	qctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	if _, err := b.db.ExecContext(qctx, fmt.Sprintf("KILL CONNECTION %d", s.holder)); err != nil {
		return driver.Info{}, fmt.Errorf("mysqllock: kill session %d: %w", s.holder, err)
	}
	// KILL returns before the session has ended and freed its locks.
	for {
		var holder sql.NullInt64
		if err := b.db.QueryRowContext(qctx, "SELECT IS_USED_LOCK(?)", LockName(key)).Scan(&holder); err != nil {
			return driver.Info{}, fmt.Errorf("mysqllock: session %d was told to end: %w", s.holder, err)
		}
		if uint64(holder.Int64) != s.holder {
			return info, nil
		}
		select {
		case <-qctx.Done():
			return driver.Info{}, fmt.Errorf("mysqllock: session %d was told to end but had not ended: %w", s.holder, qctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Cleanup deletes at most WithCleanupBatch rows of the holder table whose
// lease ended more than WithRetention ago and whose named lock nobody holds,
// and returns how many it deleted. A later grant of such a key draws a fence
// above every one the row had (see the package doc).
func (b *Backend) Cleanup(ctx context.Context) (int64, error) {
	if err := b.holds.Enter(); err != nil {
		return 0, fmt.Errorf("mysqllock: cleanup: %w", err)
	}
	defer b.holds.Leave()
	if err := b.ensureSchema(ctx); err != nil {
		return 0, err
	}
	qctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	res, err := b.db.ExecContext(qctx, cleanupSQL, b.opts.Retention.Microseconds(), b.opts.CleanupBatch)
	if err != nil {
		return 0, fmt.Errorf("mysqllock: cleanup: %w", err)
	}
	return res.RowsAffected()
}
