package pgstore

import (
	"context"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/idem"
)

func init() {
	idem.RegisterURL("postgres", openURL)
	idem.RegisterURL("postgresql", openURL)
}

// openURL is idem.OpenURL's way in: a Store in DefaultTable over a pool of
// its own on a postgres:// URL as pglock reads it, the table migrated.
func openURL(ctx context.Context, u *url.URL) (idem.Store, func(), error) {
	cfg, err := pglock.ParseURL(u)
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg.Pool)
	if err != nil {
		return nil, nil, err
	}
	s, err := New(pool)
	if err == nil {
		err = s.Migrate(ctx)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return s, pool.Close, nil
}
