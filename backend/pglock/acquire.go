package pglock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
)

// Acquire makes one attempt with pg_try_advisory_lock on a connection it pins
// if the lock is granted.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	meta, err := b.prepare(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	conn, err := b.conn(ctx, req.Key, b.opts.poolWait)
	if err != nil {
		return driver.Grant{}, err
	}
	id := b.ID(req.Key)
	q, args := b.statement(acquireSQL, acquireBareSQL, id, req, meta)
	sent := time.Now()
	var fence int64
	err = conn.QueryRow(ctx, q, args...).Scan(&fence)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		conn.Release() // the lock was not taken: the session holds nothing
		return driver.Grant{}, fmt.Errorf("pglock: acquire %q: %w", req.Key, driver.ErrNotAcquired)
	case err != nil:
		destroy(conn) // the lock may have been taken: end the session
		return driver.Grant{}, fmt.Errorf("pglock: acquire %q: %w", req.Key, err)
	}
	return b.pin(conn, req, id, fence, sent)
}

// AcquireWait waits for the lock with pg_advisory_lock, in the database's own
// queue, until ctx ends. Cancellation sends PostgreSQL a cancel request, so
// the session leaves the queue at once; the connection is then destroyed, so
// a grant that raced with the cancel dies with its session.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	meta, err := b.prepare(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	conn, err := b.conn(ctx, req.Key, 0)
	if err != nil {
		if ctx.Err() != nil {
			return driver.Grant{}, errors.Join(fmt.Errorf("pglock: acquire %q: %w", req.Key, driver.ErrNotAcquired), ctx.Err(), err)
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
		cctx, cancel := context.WithTimeout(qctx, cleanupTimeout)
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
		return driver.Grant{}, errors.Join(fmt.Errorf("pglock: acquire %q: %w", req.Key, driver.ErrNotAcquired), ctx.Err())
	}
	if err != nil {
		destroy(conn)
		return driver.Grant{}, fmt.Errorf("pglock: acquire %q: %w", req.Key, err)
	}
	// The lease starts when the grant reached us; the backend enforces it.
	return b.pin(conn, req, id, fence, granted)
}

// statement picks the acquisition statement with or without holder rows.
func (b *Backend) statement(withRow, bare string, id int64, req driver.AcquireRequest, meta []byte) (string, []any) {
	if b.opts.noRows {
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
		return nil, fmt.Errorf("pglock: acquire %q: %w", req.Key, err)
	}
	switch m := req.Meta; {
	case b.opts.noRows:
		return nil, nil
	case m.Owner == "" && m.BusinessID == "" && len(m.Labels) == 0:
		return emptyMeta, nil
	}
	meta, err := json.Marshal(req.Meta)
	if err != nil {
		return nil, fmt.Errorf("pglock: acquire %q: metadata: %w", req.Key, err)
	}
	return meta, nil
}

// conn takes a connection from the pool, waiting at most bound (if positive)
// and ctx.
func (b *Backend) conn(ctx context.Context, key string, bound time.Duration) (*pgxpool.Conn, error) {
	actx := ctx
	if bound > 0 {
		var done func()
		actx, done = b.boundedWait(ctx, bound)
		defer done()
	}
	c, err := b.pool.Acquire(actx)
	if err == nil {
		return c, nil
	}
	if st := b.pool.Stat(); actx.Err() != nil && st.AcquiredConns() >= st.MaxConns() {
		b.mu.Lock()
		n := len(b.held)
		b.mu.Unlock()
		return nil, fmt.Errorf("pglock: acquire %q: %w: all %d connections in use, %d pinned by locks this backend holds: %w",
			key, ErrPoolExhausted, st.MaxConns(), n, err)
	}
	return nil, fmt.Errorf("pglock: acquire %q: connection: %w", key, err)
}

// poolWaitEpoch is a deadline shared by the pool waits that start within the
// first quarter of it.
type poolWaitEpoch struct {
	ctx     context.Context
	cancel  context.CancelFunc // never called: the deadline ends ctx
	renewAt time.Time
}

// boundedWait returns a context that ends with ctx or, at the latest, after
// bound; it ends no sooner than 3/4 of bound from now. The deadline is shared
// by the waits that start within a quarter of bound, so that most
// acquisitions start no timer: a timer that wakes a sleeping runtime thread
// costs more than the rest of the client's work for a lock. done releases the
// context.
func (b *Backend) boundedWait(ctx context.Context, bound time.Duration) (_ context.Context, done func()) {
	now := time.Now()
	e := b.waitEpoch.Load()
	if e == nil || now.After(e.renewAt) {
		e = &poolWaitEpoch{renewAt: now.Add(bound / 4)}
		e.ctx, e.cancel = context.WithDeadline(context.Background(), now.Add(bound))
		b.waitEpoch.Store(e)
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
