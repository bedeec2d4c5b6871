package pglock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	open := func(ctx context.Context, u *url.URL) (driver.Backend, error) { return Open(ctx, u.String()) }
	distlock.Register("postgres", open)
	distlock.Register("postgresql", open)
}

// Open returns a backend over a pool of its own on connString (a pgx
// connection string; pool_max_conns bounds the locks held at once). Close
// closes the pool.
func Open(ctx context.Context, connString string, opts ...Option) (*Backend, error) {
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return nil, fmt.Errorf("pglock: open: %w", err)
	}
	b := New(pool, opts...)
	b.ownPool = true
	return b, nil
}

// ErrPoolExhausted means no connection of the pool became free in time: every
// held lock pins one, so the pool is too small for the locks held at once.
var ErrPoolExhausted = errors.New("pglock: connection pool exhausted")

// Backend holds PostgreSQL advisory locks on pinned connections of a pool.
type Backend struct {
	pool    *pgxpool.Pool
	ownPool bool
	opts    options

	schemaMu sync.Mutex
	schemaOK atomic.Bool

	mu        sync.Mutex
	held      map[string]*pinned // by token
	closed    bool
	kaRunning bool           // the keepalive loop runs
	kaNext    time.Time      // when the keepalive loop looks next
	kaWake    chan struct{}  // wakes the keepalive loop early
	wg        sync.WaitGroup // keepalive loop and rounds, the cleanup loop

	waitEpoch atomic.Pointer[poolWaitEpoch] // see boundedWait

	stopCleanup context.CancelFunc
}

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Waiter  = (*Backend)(nil)
	_ driver.Lister  = (*Backend)(nil)
	_ driver.Namer   = (*Backend)(nil)
)

// New returns a backend over pool. Close does not close pool. Every held lock
// keeps one connection of the pool.
func New(pool *pgxpool.Pool, opts ...Option) *Backend {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	b := &Backend{pool: pool, opts: o, held: make(map[string]*pinned), kaWake: make(chan struct{}, 1)}
	if o.cleanupEvery > 0 {
		var ctx context.Context
		ctx, b.stopCleanup = context.WithCancel(context.Background())
		b.wg.Add(1)
		go b.cleanupLoop(ctx)
	}
	return b
}

// Name returns "postgres".
func (b *Backend) Name() string { return "postgres" }

// ID returns the advisory lock id that key maps to under b's options.
func (b *Backend) ID(key string) int64 {
	if b.opts.ns != nil {
		return NamespacedKeyID(*b.opts.ns, key)
	}
	return KeyID(key)
}

// Migrate creates the fence sequence and the holder table if they do not
// exist. Backends also do it on first use; call it at deployment when the
// locking role may not create objects.
func (b *Backend) Migrate(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, xactLockSQL, migrateLockID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, migrateSQL)
		return err
	})
	if err != nil {
		return fmt.Errorf("pglock: migrate: %w", err)
	}
	return nil
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
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	held := make([]*pinned, 0, len(b.held))
	for _, p := range b.held {
		held = append(held, p)
	}
	clear(b.held)
	b.wakeKeepaliveLocked()
	b.mu.Unlock()

	if b.stopCleanup != nil {
		b.stopCleanup()
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	var errs []error
	for _, p := range held {
		if err := p.release(ctx); err != nil && !errors.Is(err, driver.ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	b.wg.Wait()
	if b.ownPool {
		b.pool.Close()
	}
	return errors.Join(errs...)
}

// enter registers background work unless the backend is closing.
func (b *Backend) enter() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	b.wg.Add(1)
	return true
}

// take removes and returns the pinned connection of token if it holds key.
func (b *Backend) take(key, token string) *pinned {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.held[token]
	if p == nil || p.key != key {
		return nil
	}
	delete(b.held, token)
	return p
}

// lookup returns the pinned connection of token if it holds key.
func (b *Backend) lookup(key, token string) *pinned {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.held[token]; p != nil && p.key == key {
		return p
	}
	return nil
}

// forget drops p from the table once its lock ended without Release.
func (b *Backend) forget(p *pinned) {
	b.mu.Lock()
	if b.held[p.token] == p {
		delete(b.held, p.token)
	}
	b.mu.Unlock()
}
