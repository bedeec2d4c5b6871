package pglock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
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
// closes the pool. No connection is made before the first call, which names
// the dial error if the server cannot be reached.
//
// A new connection may take connect_timeout (seconds, as in libpq) to be
// established; without it in connString, or with 0, Open sets
// DefaultConnectTimeout (5s), so an unreachable server fails a call within
// it even under context.Background(). The parameter request_timeout (a Go
// duration such as "2s") sets WithRequestTimeout, and
// terminate_on_force_release=true sets WithTerminateOnForceRelease; opts
// override them.
func Open(ctx context.Context, connString string, opts ...Option) (*Backend, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pglock: open: %w", err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	urlOpts, err := takeParams(cfg.ConnConfig.RuntimeParams)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pglock: open: %w", err)
	}
	b, err := New(pool, append(urlOpts, opts...)...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.ownPool = true
	return b, nil
}

// takeParams removes the connection string parameters that are pglock's, not
// the server's, from params and returns them as options.
func takeParams(params map[string]string) ([]Option, error) {
	var opts []Option
	if v, ok := params["request_timeout"]; ok {
		delete(params, "request_timeout")
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("pglock: open: request_timeout=%q: %w: %w", v, driver.ErrInvalidOption, err)
		}
		opts = append(opts, WithRequestTimeout(d))
	}
	if v, ok := params["terminate_on_force_release"]; ok {
		delete(params, "terminate_on_force_release")
		on, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("pglock: open: terminate_on_force_release=%q: %w: %w", v, driver.ErrInvalidOption, err)
		}
		opts = append(opts, WithTerminateOnForceRelease(on))
	}
	return opts, nil
}

// ErrPoolExhausted means no connection of the pool became free in time: every
// held lock pins one, so the pool is too small for the locks held at once.
var ErrPoolExhausted = errors.New("pglock: connection pool exhausted")

// Backend holds PostgreSQL advisory locks on pinned connections of a pool.
type Backend struct {
	pool    *pgxpool.Pool
	ownPool bool
	opts    options

	closed    atomic.Bool // set under mu by Close: every call returns driver.ErrClosed
	poolBound sharedBound // see WithPoolWait
	reqBound  sharedBound // see WithRequestTimeout

	schemaMu sync.Mutex
	schemaOK atomic.Bool

	mu        sync.Mutex
	held      map[string]*pinned // by token
	kaRunning bool               // the keepalive loop runs
	kaNext    time.Time          // when the keepalive loop looks next
	kaDue     time.Time          // no keepalive round is due before; zero: look
	kaWake    chan struct{}      // wakes the keepalive loop early
	fresh     []*pinned          // held locks not yet armed, in the order taken
	tookLock  bool               // a lock was taken since the loop last looked
	wg        sync.WaitGroup     // keepalive loop and rounds, the cleanup loop

	stopCleanup context.CancelFunc
}

var (
	_ driver.Backend = (*Backend)(nil)
	_ driver.Waiter  = (*Backend)(nil)
	_ driver.Lister  = (*Backend)(nil)
	_ driver.Namer   = (*Backend)(nil)

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
	b := &Backend{pool: pool, opts: o, held: make(map[string]*pinned), kaWake: make(chan struct{}, 1)}
	b.poolBound.d, b.reqBound.d = o.poolWait, o.requestTimeout
	if o.cleanupEvery > 0 {
		var ctx context.Context
		ctx, b.stopCleanup = context.WithCancel(context.Background())
		b.wg.Add(1)
		go b.cleanupLoop(ctx)
	}
	return b, nil
}

// closedError is the error of operation op on key once Close was called.
func (b *Backend) closedError(op, key string) error {
	if !b.closed.Load() {
		return nil
	}
	return fmt.Errorf("pglock: %s %q: %w", op, key, driver.ErrClosed)
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

// Migrate creates the fence sequence, the holder table and the tables of
// read-write locks and semaphores (distlock_pg_rw_holds,
// distlock_pg_rw_intents, distlock_pg_semaphores, distlock_pg_permits) if
// they do not exist. Backends also do it on first use; call it at
// deployment when the locking role may not create objects.
func (b *Backend) Migrate(ctx context.Context) error {
	if b.closed.Load() {
		return fmt.Errorf("pglock: migrate: %w", driver.ErrClosed)
	}
	conn, qctx, done, err := b.pooled(ctx)
	if err != nil {
		return fmt.Errorf("pglock: migrate: %w", err)
	}
	defer done()
	err = pgx.BeginFunc(qctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(qctx, xactLockSQL, migrateLockID); err != nil {
			return err
		}
		if _, err := tx.Exec(qctx, migrateSQL); err != nil {
			return err
		}
		_, err := tx.Exec(qctx, rwsemMigrateSQL)
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
// Every call after Close returns an error matching driver.ErrClosed.
func (b *Backend) Close() error {
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		return nil
	}
	b.closed.Store(true)
	held := make([]*pinned, 0, len(b.held))
	for _, p := range b.held {
		held = append(held, p)
	}
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
	if b.closed.Load() {
		return false
	}
	b.wg.Add(1)
	return true
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

// forget drops p from the table once its lock ends.
func (b *Backend) forget(p *pinned) {
	b.mu.Lock()
	if b.held[p.token] == p {
		delete(b.held, p.token)
	}
	b.mu.Unlock()
}
