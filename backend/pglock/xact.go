package pglock

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// XactLock waits for key's transaction-level advisory lock in tx
// (pg_advisory_xact_lock(b.ID(key))); commit or rollback releases it. It
// excludes the locks of the same key taken by backends with b's namespace on
// the same database, since it follows the database's key-id scheme: the
// backend's first call (this one, or any other) learns it with Migrate on a
// connection of b's pool, not tx's, so the pool needs a free connection
// then. The wait ends with ctx.
func (b *Backend) XactLock(ctx context.Context, tx pgx.Tx, key string) error {
	id, err := b.xactID(ctx, key)
	if err == nil {
		_, err = tx.Exec(ctx, xactLockSQL, id)
	}
	return xactErr(key, err)
}

// TryXactLock takes key's transaction-level advisory lock in tx if it is
// free, and returns an error matching driver.ErrNotAcquired if it is not.
// It maps key as XactLock does.
func (b *Backend) TryXactLock(ctx context.Context, tx pgx.Tx, key string) error {
	id, err := b.xactID(ctx, key)
	var ok bool
	if err == nil {
		err = tx.QueryRow(ctx, tryXactLockSQL, id).Scan(&ok)
	}
	if err == nil && !ok {
		err = driver.ErrNotAcquired
	}
	return xactErr(key, err)
}

// xactID validates key and returns its lock id once the backend knows the
// database's key-id scheme.
func (b *Backend) xactID(ctx context.Context, key string) (int64, error) {
	if err := driver.ValidateKey(key); err != nil {
		return 0, err
	}
	if err := b.holds.ClosedError(); err != nil {
		return 0, err
	}
	if err := b.ensureSchema(ctx); err != nil {
		return 0, err
	}
	return b.ID(key), nil
}

// xactErr is err, from a transaction-level lock of key, as a
// distlock.KeyError, which names the operation and the key as a client's
// errors do (no client stands between the caller and these calls); nil if
// err is nil.
func xactErr(key string, err error) error {
	if err == nil {
		return nil
	}
	return &distlock.KeyError{Op: "xact lock", Key: key, Err: driver.Wrap("pglock", err)}
}
