package mysqllock

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pinned"
)

// holder is what a grant writes to the holder table besides the key.
type holder struct {
	name   string
	labels string
}

// prepare makes sure the schema exists and encodes the holder record.
func (b *Backend) prepare(ctx context.Context, req driver.AcquireRequest) (holder, error) {
	if err := b.ensureSchema(ctx); err != nil {
		return holder{}, err
	}
	h := holder{name: LockName(req.Key), labels: "{}"}
	if len(req.Meta.Labels) > 0 {
		l, err := json.Marshal(req.Meta.Labels)
		if err != nil {
			return holder{}, fmt.Errorf("mysqllock: labels: %w", err)
		}
		h.labels = string(l)
	}
	return h, nil
}

// grab runs the acquisition statement on conn with a wait of the given
// seconds and returns the fence, or 0 if GET_LOCK did not take the lock.
func grab(ctx context.Context, conn *sql.Conn, req driver.AcquireRequest, h holder, seconds float64) (uint64, error) {
	res, err := conn.ExecContext(ctx, acquireSQL, h.name, req.Key, req.Token, req.TTL.Microseconds(),
		req.Meta.Owner, req.Meta.BusinessID, h.labels, h.name, seconds)
	if err != nil {
		return 0, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return 0, err
	}
	fence, err := res.LastInsertId()
	return uint64(fence), err
}

// Acquire makes one attempt, GET_LOCK(name, 0), on a connection it pins if
// the lock is granted. The fence and the holder record are written by the
// same statement, once the lock is taken.
func (b *Backend) Acquire(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.holds.Enter(); err != nil {
		return driver.Grant{}, err
	}
	defer b.holds.Leave()
	h, err := b.prepare(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	conn, err := b.conn(ctx, b.opts.PoolWait)
	if err != nil {
		return driver.Grant{}, err
	}
	return b.try(ctx, conn, req, h)
}

// try takes the lock on conn if it is free, pinning conn, and otherwise
// returns conn to the pool.
func (b *Backend) try(ctx context.Context, conn *sql.Conn, req driver.AcquireRequest, h holder) (driver.Grant, error) {
	qctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	sent := time.Now()
	fence, err := grab(qctx, conn, req, h, 0)
	cancel()
	switch {
	case err != nil:
		destroy(conn) // the lock may have been taken: end the session
		return driver.Grant{}, driver.Wrap("mysqllock", err)
	case fence == 0:
		_ = conn.Close() // not taken: the session holds nothing
		return driver.Grant{}, driver.ErrNotAcquired
	}
	return b.pin(conn, req, h.name, fence, sent)
}

// AcquireWait waits for the lock in GET_LOCK, in the server's own queue of
// the name, until ctx ends; a free key is granted at once. When
// ctx ends (or Close begins) the wait is ended from another connection of
// the handle with KILL QUERY, so the session leaves the queue at once, and
// the connection is then closed, so a grant that raced with the end dies
// with its session. A waiting session that the server ends (KILL, an
// operator) is replaced by a new one that waits on, at the back of the
// queue.
func (b *Backend) AcquireWait(ctx context.Context, req driver.AcquireRequest) (driver.Grant, error) {
	if err := b.holds.Enter(); err != nil {
		return driver.Grant{}, err
	}
	defer b.holds.Leave()
	h, err := b.prepare(ctx, req)
	if err != nil {
		return driver.Grant{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(b.closing, cancel)()
	for {
		g, err := b.waitOnce(wctx, req, h)
		if b.holds.Closed() && err != nil {
			return g, errors.Join(driver.ErrClosed, err)
		}
		if !errors.Is(err, pinned.ErrSessionEnded) || wctx.Err() != nil {
			return g, err
		}
	}
}

// waitOnce waits for the lock on one session.
func (b *Backend) waitOnce(ctx context.Context, req driver.AcquireRequest, h holder) (driver.Grant, error) {
	notAcquired := func() error {
		return errors.Join(driver.ErrNotAcquired, ctx.Err())
	}
	conn, err := b.conn(ctx, 0)
	if err != nil {
		if driver.Ended(ctx) {
			return driver.Grant{}, errors.Join(notAcquired(), err)
		}
		return driver.Grant{}, err
	}
	id, err := b.connID(ctx, conn)
	if err != nil {
		destroy(conn)
		if driver.Ended(ctx) {
			return driver.Grant{}, notAcquired()
		}
		return driver.Grant{}, driver.Wrap("mysqllock", err)
	}

	// The statement runs on a context of its own: ending it would make the
	// driver drop the socket while the session still waits in the server.
	wctx, qcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer qcancel()
	finished := make(chan struct{})
	killed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(killed)
		b.killQuery(ctx, id, finished, qcancel)
	})
	var fence uint64
	for {
		fence, err = grab(wctx, conn, req, h, waitSeconds(ctx))
		if err != nil || fence != 0 || ctx.Err() != nil {
			break
		}
		// GET_LOCK gave up before ctx (a server that rounds the timeout
		// down, or a KILL QUERY from someone else): wait on.
	}
	granted := time.Now()
	close(finished)
	if !stop() {
		<-killed
		destroy(conn)
		return driver.Grant{}, notAcquired()
	}
	if err != nil {
		destroy(conn)
		if !sessionLives(err) {
			return driver.Grant{}, fmt.Errorf("mysqllock: %w: %w", pinned.ErrSessionEnded, err)
		}
		return driver.Grant{}, driver.Wrap("mysqllock", err)
	}
	if fence == 0 {
		// ctx ended as GET_LOCK gave up, before the kill began: the
		// session holds nothing.
		_ = conn.Close()
		return driver.Grant{}, notAcquired()
	}
	// The lease starts when the grant reached us; the backend enforces it.
	return b.pin(conn, req, h.name, fence, granted)
}

// maxWaitSeconds caps one GET_LOCK's wait when ctx has no deadline; the
// wait then goes on in another GET_LOCK.
const maxWaitSeconds = 3600

// waitSeconds is GET_LOCK's timeout for a wait until ctx's deadline, in
// seconds to the microsecond (MariaDB honours the fraction; a server that
// does not is covered by the loop and KILL QUERY in waitOnce).
func waitSeconds(ctx context.Context) float64 {
	d, ok := ctx.Deadline()
	if !ok {
		return maxWaitSeconds
	}
	return math.Min(max(time.Until(d).Seconds(), 0.000001), maxWaitSeconds)
}

// killGrace is how long a wait whose deadline passed may take to end on its
// own (GET_LOCK times out then too) before it is killed.
const killGrace = 100 * time.Millisecond

// killQuery ends the waiting statement of session id, which ctx ended: with
// KILL QUERY from another connection of the handle, or if none can be had,
// by closing the waiting connection (the server then keeps the session
// waiting until its GET_LOCK times out, and frees whatever it got once it
// finds the connection closed). It returns once the statement finished.
func (b *Backend) killQuery(ctx context.Context, id uint64, finished <-chan struct{}, drop context.CancelFunc) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		select {
		case <-finished:
			return
		case <-time.After(killGrace):
		}
	}
	kctx, cancel := context.WithTimeout(context.Background(), min(b.opts.RequestTimeout, b.opts.PoolWait))
	defer cancel()
	if _, err := b.db.ExecContext(kctx, fmt.Sprintf("KILL QUERY %d", id)); err != nil {
		drop()
	}
	select {
	case <-finished:
	case <-time.After(pinned.CleanupTimeout):
		drop()
		<-finished
	}
}

// conn takes a connection of the handle, waiting at most bound (if not 0)
// and as long as ctx allows.
func (b *Backend) conn(ctx context.Context, bound time.Duration) (*sql.Conn, error) {
	actx := ctx
	if bound > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, bound)
		defer cancel()
	}
	c, err := b.db.Conn(actx)
	if err == nil {
		return c, nil
	}
	if st := b.db.Stats(); actx.Err() != nil && st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections {
		return nil, b.holds.PoolExhausted(ErrPoolExhausted, st.MaxOpenConnections, err)
	}
	return nil, fmt.Errorf("mysqllock: connection: %w", err)
}

// maxConnIDs bounds the cache of session ids: ids of connections that the
// handle closed on its own stay in it until it is emptied.
const maxConnIDs = 1024

// connID returns the session id of conn (CONNECTION_ID()), which a wait
// needs so that it can be ended with KILL QUERY: asked once per connection
// of the handle and then remembered.
func (b *Backend) connID(ctx context.Context, conn *sql.Conn) (uint64, error) {
	var dc any
	_ = conn.Raw(func(c any) error { dc = c; return nil })
	b.idMu.Lock()
	id, ok := b.ids[dc]
	b.idMu.Unlock()
	if ok {
		return id, nil
	}
	qctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	if err := conn.QueryRowContext(qctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		return 0, err
	}
	b.idMu.Lock()
	if len(b.ids) >= maxConnIDs {
		clear(b.ids)
	}
	b.ids[dc] = id
	b.idMu.Unlock()
	return id, nil
}
