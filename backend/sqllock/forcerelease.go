package sqllock

import (
	"context"
	"database/sql"
	"errors"

	"github.com/distlock/distlock/driver"
)

// ForceRelease frees key whatever token holds it, for operators, and returns
// the hold it ended (fence, metadata, time to live left). If key is not held
// it returns an error matching driver.ErrNotHeld and changes nothing. The
// holder learns of it at once on PostgreSQL (see the package doc), else at
// its next renewal (driver.ErrNotHeld); its Release then frees nothing. The
// next grant of key gets a higher fence.
func (b *Backend) ForceRelease(ctx context.Context, key string, _ driver.ForceOptions) (driver.Info, error) {
	var info driver.Info
	err := b.run(ctx, func(ctx context.Context) (err error) {
		info, err = b.forceRelease(ctx, key)
		return err
	})
	switch {
	case errors.Is(err, driver.ErrNotHeld):
		return driver.Info{}, err
	case err != nil:
		return driver.Info{}, b.fail(err)
	}
	return info, nil
}

// forceRelease locks key's row in a transaction, checks that it is held,
// and frees it.
func (b *Backend) forceRelease(ctx context.Context, key string) (driver.Info, error) {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return driver.Info{}, err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	info := driver.Info{Key: key}
	err = scanInfo(tx.QueryRowContext(ctx, b.d.inspectForUpdate, key), &info, &info.Held)
	switch {
	case errors.Is(err, sql.ErrNoRows) || err == nil && !info.Held:
		return driver.Info{}, driver.ErrNotHeld
	case err != nil:
		return driver.Info{}, err
	}
	if _, err := tx.ExecContext(ctx, b.d.forceRelease, key); err != nil {
		return driver.Info{}, err
	}
	return info, tx.Commit()
}
