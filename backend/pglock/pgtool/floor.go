package pgtool

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/storetool/floor"
)

// postgresFloor is pg_try_advisory_lock and pg_advisory_unlock on one
// connection, taken from the pool for the hold and given back after the
// unlock, as a lock that pins a connection does. Each client has a pool of
// its own, sized by the URL as the backend's is. The id is pglock.KeyID's,
// the scheme a new database gets, whatever the database records: the floor
// costs the same under either scheme, and its keys are its own.
type postgresFloor struct{ pools []*pgxpool.Pool }

// openPostgresFloor opens cfg.Clients pools on the URL, each configured as
// pglock.ParseURL reads it, as Open's pool is.
func openPostgresFloor(ctx context.Context, u *url.URL, cfg floor.Config) (floor.Target, error) {
	pc, err := pglock.ParseURL(u)
	if err != nil {
		return nil, err
	}
	f := &postgresFloor{}
	for range cfg.Clients {
		p, err := pgxpool.NewWithConfig(ctx, pc.Pool.Copy())
		if err != nil {
			return nil, errors.Join(err, f.Close())
		}
		f.pools = append(f.pools, p)
	}
	return f, nil
}

// Lock tries the key's advisory lock on a connection from the worker's
// pool, held until the release.
func (f *postgresFloor) Lock(ctx context.Context, w int, key string) (func(context.Context) error, error) {
	conn, err := f.pools[w%len(f.pools)].Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("connection from the pool: %w", err)
	}
	id := pglock.KeyID(floor.KeyPrefix + key)
	var ok bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, fmt.Errorf("pg_try_advisory_lock: %w", err)
		}
		return nil, distlock.ErrNotAcquired
	}
	return func(ctx context.Context) error {
		var ok bool
		err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", id).Scan(&ok)
		if err != nil { // the session may still hold the lock: never reuse it
			_ = conn.Conn().Close(ctx)
		}
		conn.Release()
		switch {
		case err != nil:
			return fmt.Errorf("pg_advisory_unlock: %w", err)
		case !ok:
			return fmt.Errorf("pg_advisory_unlock: %w", distlock.ErrNotHeld)
		}
		return nil
	}, nil
}

// Close closes the pools.
func (f *postgresFloor) Close() error {
	for _, p := range f.pools {
		p.Close()
	}
	return nil
}
