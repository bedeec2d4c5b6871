package pglock

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/keyrange"
)

// Renew confirms that the pinned session of token is alive and moves the
// lease to ttl from now. The advisory lock lives as long as the session.
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

// Release unlocks key if token holds it through this backend, and returns
// its connection to the pool (or destroys it if the unlock failed). A renewal
// or keepalive in flight on the connection finishes first.
func (b *Backend) Release(ctx context.Context, key, token string) error {
	if err := b.holds.ClosedError(); err != nil {
		return err
	}
	p := b.holds.Lookup(key, token)
	if p == nil {
		return driver.ErrNotHeld
	}
	return p.Release(ctx)
}

// Inspect reports whether any session holds key's advisory lock (pg_locks)
// and, if it was taken through pglock, its fence, time to live and metadata:
// from the holder row, or for a hold of this backend, from memory. A free key
// reports the fence of its last grant while its row remains. With
// WithDeferredHolderRows a hold of another process is described once its
// row is written, when it has lasted the watch delay, and reported held
// without the rest before; a free key then reports fence 0, since its row
// may be older than its last grant.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	if err := b.holds.ClosedError(); err != nil {
		return driver.Info{}, err
	}
	if err := b.ensureSchema(ctx); err != nil {
		return driver.Info{}, err
	}
	var (
		held, current bool
		fence, ttlUS  int64
		pid           int32
		meta          []byte
	)
	conn, qctx, done, err := b.pooled(ctx)
	if err == nil {
		err = conn.QueryRow(qctx, inspectSQL, b.ID(key), key).Scan(&held, &pid, &current, &fence, &meta, &ttlUS)
		done()
	}
	if err != nil {
		return driver.Info{}, driver.Wrap("pglock", err)
	}
	info := driver.Info{Key: key, Held: held}
	switch {
	case held && current:
		info.Fence, info.TTL = uint64(fence), max(time.Duration(ttlUS)*time.Microsecond, 0)
		if err := json.Unmarshal(meta, &info.Meta); err != nil {
			return driver.Info{}, fmt.Errorf("pglock: metadata: %w", err)
		}
	case held:
		if p := b.heldBy(key, uint32(pid)); p != nil {
			info = p.Info()
		}
	case b.opts.rowMode() == rowsAtGrant:
		info.Fence = uint64(fence)
	}
	return info, nil
}

// heldBy returns this backend's hold of key on the session pid, if any.
func (b *Backend) heldBy(key string, pid uint32) (held *session) {
	b.holds.Range(func(p *session) bool {
		if p.Key == key && p.pid == pid {
			held = p
		}
		return held == nil
	})
	return held
}

// List returns the locks taken through pglock whose keys start with prefix
// and whose session still holds them, sorted by key: those with a holder row
// (see Inspect), and this backend's own. It reads every holder row of the
// prefix: ListPage's statement without a limit.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	infos, err := b.list(ctx, listPageSQL, "", prefix, keyrange.End(prefix), nil)
	if err != nil {
		return nil, err
	}
	return b.withOwn(infos, prefix, ""), nil
}

// ListPage returns, sorted by key byte for byte, at most limit of the locks
// List would return whose keys sort after after. It reads the holder rows
// from an index of their keys in byte order, from after (or prefix) on,
// until the page is full of rows whose session holds their lock, or the
// prefix's keys end; and, as List does, the server's table of locks
// (pg_locks) once.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if limit < 1 {
		return nil, fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit)
	}
	infos, err := b.list(ctx, listPageSQL, after, prefix, keyrange.End(prefix), limit)
	if err != nil {
		return nil, err
	}
	infos = b.withOwn(infos, prefix, after)
	return infos[:min(len(infos), limit)], nil
}

// list returns the holders that q, a listing statement, reads with args.
func (b *Backend) list(ctx context.Context, q string, args ...any) ([]driver.Info, error) {
	if err := b.holds.ClosedError(); err != nil {
		return nil, err
	}
	if err := b.ensureSchema(ctx); err != nil {
		return nil, err
	}
	conn, qctx, done, err := b.pooled(ctx)
	if err != nil {
		return nil, driver.Wrap("pglock", err)
	}
	defer done()
	rows, err := conn.Query(qctx, q, args...)
	if err != nil {
		return nil, driver.Wrap("pglock", err)
	}
	infos, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.Info, error) {
		var (
			info  = driver.Info{Held: true}
			fence int64
			ttlUS int64
			meta  []byte
		)
		if err := r.Scan(&info.Key, &fence, &meta, &ttlUS); err != nil {
			return info, err
		}
		info.Fence, info.TTL = uint64(fence), max(time.Duration(ttlUS)*time.Microsecond, 0)
		return info, json.Unmarshal(meta, &info.Meta)
	})
	if err != nil {
		return nil, driver.Wrap("pglock", err)
	}
	return infos, nil
}

// withOwn adds to infos, sorted by key, this backend's holds of keys with
// prefix after after that have no holder row yet.
func (b *Backend) withOwn(infos []driver.Info, prefix, after string) []driver.Info {
	listed := make(map[string]bool, len(infos))
	for _, in := range infos {
		listed[in.Key] = true
	}
	b.holds.Range(func(p *session) bool {
		if !p.published.Load() && !listed[p.Key] && strings.HasPrefix(p.Key, prefix) && p.Key > after {
			infos = append(infos, p.Info())
			listed[p.Key] = true
		}
		return true
	})
	slices.SortFunc(infos, func(a, b driver.Info) int { return strings.Compare(a.Key, b.Key) })
	return infos
}

// pooled takes a connection of the pool within ctx (a new one is dialled
// within the pool's connect timeout, so that its error names the server) and
// returns it with a context for its statements, bounded by the request
// timeout too. done releases both.
func (b *Backend) pooled(ctx context.Context) (_ *pgxpool.Conn, qctx context.Context, done func(), _ error) {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("connection: %w", err)
	}
	qctx, end := b.reqBound.within(ctx)
	return conn, qctx, func() { end(); conn.Release() }, nil
}
