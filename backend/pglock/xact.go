package pglock

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock/driver"
)

// XactLock waits for key's transaction-level advisory lock in tx
// (pg_advisory_xact_lock(KeyID(key))); commit or rollback releases it. It
// excludes session locks of the same key taken by a Backend without a
// namespace. The wait ends with ctx.
func XactLock(ctx context.Context, tx pgx.Tx, key string) error {
	if err := driver.ValidateKey(key); err != nil {
		return fmt.Errorf("pglock: xact lock: %w", err)
	}
	if _, err := tx.Exec(ctx, xactLockSQL, KeyID(key)); err != nil {
		return fmt.Errorf("pglock: xact lock %q: %w", key, err)
	}
	return nil
}

// TryXactLock takes key's transaction-level advisory lock in tx if it is
// free, and returns an error matching driver.ErrNotAcquired if it is not.
func TryXactLock(ctx context.Context, tx pgx.Tx, key string) error {
	if err := driver.ValidateKey(key); err != nil {
		return fmt.Errorf("pglock: xact lock: %w", err)
	}
	var ok bool
	if err := tx.QueryRow(ctx, tryXactLockSQL, KeyID(key)).Scan(&ok); err != nil {
		return fmt.Errorf("pglock: xact lock %q: %w", key, err)
	}
	if !ok {
		return fmt.Errorf("pglock: xact lock %q: %w", key, driver.ErrNotAcquired)
	}
	return nil
}
