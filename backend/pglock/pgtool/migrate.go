package pgtool

import (
	"context"
	"net/url"

	"github.com/distlock/distlock/backend/pglock"
)

// migratePostgres is the migration of a postgres:// URL, read by pglock's
// ParseURL: pglock's Migrate, which the backend also runs on first use,
// here ahead of it by a role that may create the tables.
func migratePostgres(ctx context.Context, u *url.URL) (string, error) {
	b, err := pglock.Open(ctx, u.String())
	if err != nil {
		return "", err
	}
	defer b.Close()
	if err := b.Migrate(ctx); err != nil {
		return "", err
	}
	return "the fence sequence distlock_pg_fence, the holder table distlock_pg_locks, the tables of read-write locks and semaphores and the settings table distlock_pg_settings", nil
}
