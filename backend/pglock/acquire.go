package pglock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pinned"
)

// Acquire makes one attempt with pg_try_advisory_lock on a connection it pins
// if the lock is granted.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.holds.ClosedError(); err != nil {
		return driver.Grant{}, err
	}
	meta, err := b.prepare(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	conn, err := b.conn(ctx, &b.poolBound)
	if err != nil {
		return driver.Grant{}, err
	}
	id := b.ID(req.Key)
	q, args := b.statement(acquireSQL, acquireBareSQL, id, req, meta)
	qctx, done := b.reqBound.within(ctx)
	sent := time.Now()
	var fence int64
	err = conn.QueryRow(qctx, q, args...).Scan(&fence)
	done()
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		conn.Release() // the lock was not taken: the session holds nothing
		return driver.Grant{}, driver.ErrNotAcquired
	case err != nil:
		destroy(conn) // the lock may have been taken: end the session
		return driver.Grant{}, driver.Wrap("pglock", err)
	}
	return b.pin(conn, req, id, fence, sent, meta)
}

// AcquireWait waits for the lock with pg_advisory_lock, in the database's own
// queue, until ctx ends. Cancellation sends PostgreSQL a cancel request, so
// the session leaves the queue at once; the connection is then destroyed, so
// a grant that raced with the cancel dies with its session. A waiting session
// that the server ends (pg_terminate_backend, an operator) is replaced by a
// new one that waits on, at the back of the queue.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.holds.ClosedError(); err != nil {
		return driver.Grant{}, err
	}
	meta, err := b.prepare(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	for {
		g, err := b.waitOnce(ctx, req, meta)
		if !errors.Is(err, pinned.ErrSessionEnded) || ctx.Err() != nil {
			return g, err
		}
	}
}

// waitOnce waits for the lock on one session.
func (b *Backend) waitOnce(ctx context.Context, req driver.AcquireRequest, meta []byte) (driver.Grant, error) {
	conn, err := b.conn(ctx, nil)
	if err != nil {
		if driver.Ended(ctx) {
			return driver.Grant{}, errors.Join(driver.ErrNotAcquired, ctx.Err(), err)
		}
		return driver.Grant{}, err
	}
	id := b.ID(req.Key)

	// The query runs on a context of its own: ending it would make pgx drop
	// the socket while the session may still wait in the lock queue.
	qctx, qcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer qcancel()
	cancelDone := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelDone)
		cctx, cancel := context.WithTimeout(qctx, pinned.CleanupTimeout)
		defer cancel()
		_ = conn.Conn().PgConn().CancelRequest(cctx)
		<-cctx.Done() // the query ended, or the server ignored the cancel
		qcancel()
	})
	q, args := b.statement(acquireWaitSQL, acquireWaitBareSQL, id, req, meta)
	var fence int64
	err = conn.QueryRow(qctx, q, args...).Scan(&fence)
	granted := time.Now()
	if !stop() {
		qcancel()
		<-cancelDone
		destroy(conn)
		return driver.Grant{}, errors.Join(driver.ErrNotAcquired, ctx.Err())
	}
	if err != nil {
		ended := conn.Conn().IsClosed()
		destroy(conn)
		if ended {
			return driver.Grant{}, fmt.Errorf("pglock: %w: %w", pinned.ErrSessionEnded, err)
		}
		return driver.Grant{}, driver.Wrap("pglock", err)
	}
	// The lease starts when the grant reached us; the backend enforces it.
	return b.pin(conn, req, id, fence, granted, meta)
}

// statement picks the acquisition statement with or without the holder row.
func (b *Backend) statement(withRow, bare string, id int64, req driver.AcquireRequest, meta []byte) (string, []any) {
	if b.opts.rowMode() != rowsAtGrant {
		return bare, []any{id}
	}
	return withRow, []any{id, req.Key, req.Token, req.TTL.Milliseconds(), meta}
}

// emptyMeta is the encoding of a zero driver.Meta.
var emptyMeta = []byte("{}")

// prepare makes sure the schema exists and encodes the metadata for the
// holder row (none without holder rows).
func (b *Backend) prepare(ctx context.Context, req driver.AcquireRequest) ([]byte, error) {
	if err := b.ensureSchema(ctx); err != nil {
		return nil, err
	}
	switch m := req.Meta; {
	case b.opts.rowMode() == rowsNone:
		return nil, nil
	case m.Owner == "" && m.BusinessID == "" && len(m.Labels) == 0:
		return emptyMeta, nil
	}
	meta, err := json.Marshal(req.Meta)
	if err != nil {
		return nil, fmt.Errorf("pglock: metadata: %w", err)
	}
	return meta, nil
}

// conn takes a connection from the pool, waiting at most as long as bound
// (if not nil) and ctx allow.
func (b *Backend) conn(ctx context.Context, bound *sharedBound) (*pgxpool.Conn, error) {
	actx := ctx
	if bound != nil {
		var done func()
		actx, done = bound.within(ctx)
		defer done()
	}
	c, err := b.pool.Acquire(actx)
	if err == nil {
		return c, nil
	}
	if st := b.pool.Stat(); actx.Err() != nil && st.AcquiredConns() >= st.MaxConns() {
		return nil, b.holds.PoolExhausted(ErrPoolExhausted, int(st.MaxConns()), err)
	}
	if actx.Err() != nil && ctx.Err() == nil {
		cfg := b.pool.Config().ConnConfig
		return nil, fmt.Errorf("pglock: connection: none free or connected to %s:%d within WithPoolWait: %w", cfg.Host, cfg.Port, err)
	}
	return nil, fmt.Errorf("pglock: connection: %w", err)
}

// sharedBound bounds operations by a deadline shared by the operations that
// start within the first quarter of it: each ends at most d and at least 3/4
// of d after it started. Most operations therefore start no timer: a timer
// that wakes a sleeping runtime thread costs more than the rest of the
// client's work for a lock.
type sharedBound struct {
	d   time.Duration
	cur atomic.Pointer[boundEpoch]
}

// boundEpoch is one shared deadline.
type boundEpoch struct {
	ctx     context.Context
	cancel  context.CancelFunc // never called: the deadline ends ctx
	renewAt time.Time
}

// within returns a context that ends with ctx or at the shared deadline,
// whichever comes first. done releases it.
func (s *sharedBound) within(ctx context.Context) (_ context.Context, done func()) {
	now := time.Now()
	e := s.cur.Load()
	if e == nil || now.After(e.renewAt) {
		e = &boundEpoch{renewAt: now.Add(s.d / 4)}
		e.ctx, e.cancel = context.WithDeadline(context.Background(), now.Add(s.d))
		s.cur.Store(e)
	}
	if ctx.Done() == nil {
		return deadlineOf{ctx, e.ctx}, func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(e.ctx, cancel)
	return wctx, func() { stop(); cancel() }
}

// deadlineOf is a context with the values of its Context and the deadline
// and cancellation of d.
type deadlineOf struct {
	context.Context
	d context.Context
}

func (c deadlineOf) Deadline() (time.Time, bool) { return c.d.Deadline() }
func (c deadlineOf) Done() <-chan struct{}       { return c.d.Done() }
func (c deadlineOf) Err() error                  { return c.d.Err() }

// AfterFunc lets contexts derived from c follow it without a goroutine.
func (c deadlineOf) AfterFunc(f func()) func() bool { return context.AfterFunc(c.d, f) }
