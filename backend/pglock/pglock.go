package pglock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pinned"
)

// ErrPoolExhausted means no connection of the pool became free in time: every
// held lock pins one, so the pool is too small for the locks held at once.
var ErrPoolExhausted = errors.New("pglock: connection pool exhausted")

// ErrKeyIDsMismatch means the database records another key-id scheme than
// the backend was given (WithKeyIDs, key_ids) or had adopted: its clients
// lock other ids for the same keys, so the backend takes nothing.
var ErrKeyIDsMismatch = errors.New("pglock: key-id scheme mismatch")

// Backend holds PostgreSQL advisory locks on pinned connections of a pool.
type Backend struct {
	pool    *pgxpool.Pool
	ownPool bool
	opts    config

	holds     *pinned.Holds[*session]
	poolBound sharedBound // see WithPoolWait
	reqBound  sharedBound // see WithRequestTimeout

	schemaMu sync.Mutex
	schemaOK atomic.Bool
	keyIDs   atomic.Pointer[KeyIDs] // the database's scheme; nil until Migrate read it
}

var (
	_ driver.Backend    = (*Backend)(nil)
	_ driver.Waiter     = (*Backend)(nil)
	_ driver.Lister     = (*Backend)(nil)
	_ driver.PageLister = (*Backend)(nil)
	_ driver.Namer      = (*Backend)(nil)

	_ driver.ForceReleaser = (*Backend)(nil)
)

// New returns a backend over pool. Close does not close pool. Every held lock
// keeps one connection of the pool. It returns an error matching
// driver.ErrInvalidOption, naming the option, for an option out of range.
func New(pool *pgxpool.Pool, opts ...Option) (*Backend, error) {
	if pool == nil {
		return nil, fmt.Errorf("pglock: new: %w: nil pool", driver.ErrInvalidOption)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	b := &Backend{pool: pool, opts: o,
		holds: pinned.New[*session](pinned.Config{Name: "pglock", Keepalive: o.Keepalive, WatchDelay: o.watchDelay})}
	b.poolBound.d, b.reqBound.d = o.PoolWait, o.RequestTimeout
	if o.CleanupInterval > 0 {
		b.holds.StartCleanup(o.CleanupInterval, o.CleanupBatch, b.Cleanup)
	}
	return b, nil
}

// Name returns "postgres".
func (b *Backend) Name() string { return "postgres" }

// ID returns the advisory lock id that key maps to under b's options and
// the database's key-id scheme (KeyIDs). The backend learns the scheme in
// Migrate, which its first call runs; ID panics before that, since an id of
// another scheme than the database's would not exclude its other clients.
func (b *Backend) ID(key string) int64 {
	ids := b.keyIDs.Load()
	switch {
	case ids == nil:
		panic("pglock: Backend.ID called before the backend knows the database's key-id scheme: call Migrate first")
	case *ids == KeyIDsFNV1a && b.opts.ns != nil:
		return LegacyNamespacedKeyID(*b.opts.ns, key)
	case *ids == KeyIDsFNV1a:
		return LegacyKeyID(key)
	case b.opts.ns != nil:
		return NamespacedKeyID(*b.opts.ns, key)
	}
	return KeyID(key)
}

// KeyIDs returns the key-id scheme the backend uses, the one the database
// records, or "" before the backend's first call or Migrate. KeyIDsFNV1a
// means that clients which choose keys can make two keys share a lock (see
// LegacyKeyID): move the database to KeyIDsSHA256 once every client is
// upgraded (docs/sql.md says how).
func (b *Backend) KeyIDs() KeyIDs {
	if ids := b.keyIDs.Load(); ids != nil {
		return *ids
	}
	return ""
}

// Migrate creates the fence sequence, the holder table, the tables of
// read-write locks and semaphores (distlock_pg_rw_holds,
// distlock_pg_rw_intents, distlock_pg_semaphores, distlock_pg_permits,
// distlock_pg_permit_intents) and the settings table (distlock_pg_settings)
// if they do not exist, and learns the database's key-id scheme from its row
// key_ids (see WithKeyIDs), which it writes if the database records none:
// the scheme given with WithKeyIDs, else KeyIDsFNV1a if distlock_pg_locks
// existed before (an older version used the database and locks FNV-1a ids),
// else KeyIDsSHA256. It returns an error matching ErrKeyIDsMismatch if the
// database records another scheme than WithKeyIDs gave, or than the backend
// adopted before. Backends also do it on first use; call it at deployment
// when the locking role may not create objects.
func (b *Backend) Migrate(ctx context.Context) error {
	if b.holds.Closed() {
		return fmt.Errorf("pglock: migrate: %w", driver.ErrClosed)
	}
	conn, qctx, done, err := b.pooled(ctx)
	if err != nil {
		return fmt.Errorf("pglock: migrate: %w", err)
	}
	defer done()
	want, adopted := b.opts.keyIDs, b.keyIDs.Load()
	if adopted != nil {
		want = *adopted
	}
	var recorded KeyIDs
	err = pgx.BeginFunc(qctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(qctx, xactLockSQL, migrateLockID); err != nil {
			return err
		}
		var used bool // an older version made the holder table
		if err := tx.QueryRow(qctx, usedBeforeSQL).Scan(&used); err != nil {
			return err
		}
		for _, q := range []string{migrateSQL, rwsemMigrateSQL, settingsMigrateSQL} {
			if _, err := tx.Exec(qctx, q); err != nil {
				return err
			}
		}
		first := want
		switch {
		case first != "":
		case used:
			first = KeyIDsFNV1a
		default:
			first = KeyIDsSHA256
		}
		return tx.QueryRow(qctx, keyIDsSQL, string(first)).Scan(&recorded)
	})
	if err != nil {
		return fmt.Errorf("pglock: migrate: %w", err)
	}
	if err := recorded.valid(); err != nil {
		return fmt.Errorf("pglock: migrate: distlock_pg_settings key_ids: %w", err)
	}
	if want != "" && recorded != want {
		return b.keyIDsMismatch(recorded, want, adopted != nil)
	}
	if !b.keyIDs.CompareAndSwap(nil, &recorded) && b.KeyIDs() != recorded {
		return b.keyIDsMismatch(recorded, b.KeyIDs(), true)
	}
	return nil
}

// keyIDsMismatch is Migrate's error for a database that records the scheme
// recorded while the backend was given, or had adopted, want.
func (b *Backend) keyIDsMismatch(recorded, want KeyIDs, adopted bool) error {
	if adopted {
		return fmt.Errorf("pglock: migrate: %w: the database records key_ids %q but this backend has locked %q ids since its first call: the scheme was changed while clients ran; restart every client",
			ErrKeyIDsMismatch, recorded, want)
	}
	return fmt.Errorf("pglock: migrate: %w: the database records key_ids %q but the backend was given %q (WithKeyIDs or key_ids): leave the option out to adopt the database's scheme, or change the database's with every client stopped (see docs/sql.md)",
		ErrKeyIDsMismatch, recorded, want)
}

// ensureSchema runs Migrate once per backend.
func (b *Backend) ensureSchema(ctx context.Context) error {
	if b.schemaOK.Load() {
		return nil
	}
	b.schemaMu.Lock()
	defer b.schemaMu.Unlock()
	if b.schemaOK.Load() {
		return nil
	}
	if err := b.Migrate(ctx); err != nil {
		return err
	}
	b.schemaOK.Store(true)
	return nil
}

// Close unlocks every lock the backend still holds, returns their
// connections, stops the cleanup, and closes the pool if Open created it.
// Every call after Close returns an error matching driver.ErrClosed.
func (b *Backend) Close() error {
	return b.holds.Close(nil, func() error {
		if b.ownPool {
			b.pool.Close()
		}
		return nil
	})
}
