package sqllock

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

// Inspect reports key's row. A key whose lease expired (or, on MariaDB and
// MySQL, was released) reports the fence of its last grant until cleanup
// deletes the row; on PostgreSQL a released key has no row.
func (b *Backend) Inspect(ctx context.Context, key string) (driver.Info, error) {
	info := driver.Info{Key: key}
	err := b.scanRow(ctx, func(r *sql.Row) error { return scanInfo(r, &info, &info.Held) }, b.d.inspect, key)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return driver.Info{Key: key}, nil
	case err != nil:
		return driver.Info{}, b.fail(err)
	}
	if !info.Held {
		info.TTL, info.Meta = 0, driver.Meta{}
	}
	return info, nil
}

// List returns the held locks whose keys start with prefix, sorted by key.
// It reads every row of the table.
func (b *Backend) List(ctx context.Context, prefix string) ([]driver.Info, error) {
	var infos []driver.Info
	err := b.run(ctx, func(ctx context.Context) error {
		var err error
		infos, err = b.list(ctx, b.d.list, prefix, prefix)
		return err
	})
	if err != nil {
		return nil, b.fail(err)
	}
	return infos, nil
}

// ListPage returns, sorted by key byte for byte, at most limit held locks
// whose keys start with prefix and sort after after. It reads the rows of an
// index of the keys in byte order from after (or prefix) on, until the page
// is full or the prefix's keys end: about a page of rows, plus those of
// expired leases that cleanup has not deleted yet. On PostgreSQL that index
// is distlock_leases_key_bytes, which Migrate creates; without it the
// database reads the whole table, as for List, and sorts the prefix's rows.
func (b *Backend) ListPage(ctx context.Context, prefix, after string, limit int) ([]driver.Info, error) {
	if limit < 1 {
		return nil, b.fail(fmt.Errorf("%w: limit %d, want at least 1", driver.ErrInvalidOption, limit))
	}
	var infos []driver.Info
	err := b.run(ctx, func(ctx context.Context) error {
		var err error
		infos, err = b.list(ctx, b.d.listPage, after, prefix, keyrange.End(prefix), prefix, prefix, limit)
		return err
	})
	if err != nil {
		return nil, b.fail(err)
	}
	return infos, nil
}

// list runs q, a listing statement, with args.
func (b *Backend) list(ctx context.Context, q string, args ...any) ([]driver.Info, error) {
	s, err := b.stmt(ctx, q)
	if err != nil {
		return nil, err
	}
	rows, err := s.QueryContext(ctx, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var infos []driver.Info
	for rows.Next() {
		info := driver.Info{Held: true}
		if err := scanInfo(rows, &info, &info.Key); err != nil {
			return nil, err
		}
		infos = append(infos, info)
	}
	return infos, rows.Err()
}

// scanInfo reads first (held or key), fence, owner, metadata and ttl µs.
func scanInfo(row interface{ Scan(...any) error }, info *driver.Info, first any) error {
	var (
		fence, ttlUS int64
		owner, meta  string
	)
	if err := row.Scan(first, &fence, &owner, &meta, &ttlUS); err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(meta), &info.Meta); err != nil {
		return fmt.Errorf("metadata: %w", err)
	}
	info.Fence, info.TTL, info.Meta.Owner = uint64(fence), max(time.Duration(ttlUS)*time.Microsecond, 0), owner
	return nil
}
