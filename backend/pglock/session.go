package pglock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pinned"
)

// session is one held lock: the pool connection whose session holds its
// advisory lock, and what its holder row needs. The Hold keeps it out of the
// pool while the lock is held.
//
// The connection is watched (pinned.Watcher): a watcher blocks reading the
// idle connection, so that a session the server ends (pg_terminate_backend,
// a shutdown, a cut connection) is noticed at once; a call that needs the
// connection wakes it with a read deadline in the past, which pgx reports as
// a timeout and survives.
type session struct {
	pinned.Hold[*session]

	b         *Backend
	conn      *pgxpool.Conn
	id        int64
	meta      []byte      // the holder row's metadata, encoded
	pid       uint32      // the session's backend pid
	published atomic.Bool // the holder row is written
}

var _ pinned.Watcher = (*session)(nil)

// pin registers a granted lock, schedules its keepalive and the start of
// watching its connection (at once without a watch delay).
func (b *Backend) pin(conn *pgxpool.Conn, req driver.AcquireRequest, id, fence int64, sent time.Time, meta []byte) (driver.Grant, error) {
	p := &session{b: b, conn: conn, id: id, meta: meta, pid: conn.Conn().PgConn().PID()}
	p.published.Store(b.opts.rowMode() == rowsAtGrant)
	return b.holds.Pin(&p.Hold, p, req, uint64(fence), sent)
}

// Lasted arms the watch of a hold that lasted the watch delay. A hold whose
// row is written once it lasts (WithDeferredHolderRows) writes it first, in
// a goroutine.
func (p *session) Lasted() {
	if p.b.opts.rowMode() == rowsLasting && !p.published.Load() {
		if p.b.holds.Enter() == nil {
			go p.publishThenArm()
		}
		return
	}
	p.Arm()
}

// publishThenArm writes the holder row of a hold that lasted the watch
// delay, on its connection, then arms the watch. A release meanwhile waits
// for the write (bounded by the request timeout); a hold that ended first
// writes nothing. A failed write leaves the hold without a row: Inspect and
// List of other processes then see it held without its fence and metadata.
func (p *session) publishThenArm() {
	defer p.b.holds.Leave()
	_ = p.Lock(context.Background()) // whoever holds conn is bounded by a request timeout
	if !p.Ended() {
		if err := p.publishLocked(context.Background(), p.Deadline()); err != nil && p.conn.Conn().IsClosed() {
			p.DieLocked()
		}
	}
	p.Arm()
	p.Unlock()
}

// publishLocked writes the holder row, with the lease ending at deadline.
// The caller holds Lock.
func (p *session) publishLocked(ctx context.Context, deadline time.Time) error {
	ctx, cancel := p.statementContext(ctx)
	defer cancel()
	left := max(time.Until(deadline).Milliseconds(), 0)
	if _, err := p.conn.Exec(ctx, publishSQL, p.id, p.Key, p.Token, int64(p.Fence), left, p.meta); err != nil {
		return fmt.Errorf("pglock: holder row: %w", err)
	}
	p.published.Store(true)
	return nil
}

// Await blocks reading the idle connection until Interrupt or the end of
// the session.
func (p *session) Await() bool {
	pc := p.conn.Conn().PgConn()
	var err error
	for err == nil { // a notification (LISTEN on a pooled session): read on
		err = pc.WaitForNotification(context.Background())
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && !pc.IsClosed()
}

// Interrupt ends Await's read with a deadline in the past.
func (p *session) Interrupt() { _ = p.netConn().SetReadDeadline(time.Unix(1, 0)) }

// Resume clears the read deadline that Interrupt set.
func (p *session) Resume() { _ = p.netConn().SetReadDeadline(time.Time{}) }

// netConn is the connection's socket.
func (p *session) netConn() net.Conn { return p.conn.Conn().PgConn().Conn() }

// Ping runs the keepalive query.
func (p *session) Ping(ctx context.Context) error {
	ctx, cancel := p.statementContext(ctx)
	defer cancel()
	return p.conn.Ping(ctx)
}

// Extend confirms the session and moves the holder row's lease: a hold
// renewed before its row was written writes it now.
func (p *session) Extend(ctx context.Context, sent time.Time, ttl time.Duration) error {
	ctx, cancel := p.statementContext(ctx)
	defer cancel()
	switch {
	case p.b.opts.rowMode() == rowsNone:
		return p.conn.Ping(ctx)
	case !p.published.Load():
		return p.publishLocked(ctx, sent.Add(ttl))
	}
	_, err := p.conn.Exec(ctx, renewSQL, p.Key, p.Token, ttl.Milliseconds())
	return err
}

// statementContext bounds a statement on the pinned connection while the
// lock is held. pgx closes a connection whose statement is cut short, which
// ends the session and frees the lock, so a statement is never cut before
// the lease ends, however slow the link: it has the request timeout beyond
// the lease's end (or beyond now, if later). A lock whose lease ran out
// during a slow statement is unlocked by the keepalive round that follows.
// The caller holds Lock.
func (p *session) statementContext(ctx context.Context) (context.Context, context.CancelFunc) {
	end := p.Deadline()
	if now := time.Now(); end.Before(now) {
		end = now
	}
	return context.WithDeadline(ctx, end.Add(p.b.opts.RequestTimeout))
}

// Free unlocks the advisory lock.
func (p *session) Free(ctx context.Context) (bool, error) {
	var unlocked bool
	err := p.conn.QueryRow(ctx, releaseSQL, p.id).Scan(&unlocked)
	return unlocked, err
}

// Bound bounds ctx by the request timeout.
func (p *session) Bound(ctx context.Context) (context.Context, func()) {
	return p.b.reqBound.within(ctx)
}

// Lives reports whether the connection is still open.
func (p *session) Lives(error) bool { return !p.conn.Conn().IsClosed() }

// Return gives the connection back to the pool.
func (p *session) Return() { p.conn.Release() }

// Destroy closes the connection.
func (p *session) Destroy() { destroy(p.conn) }

// destroy closes a connection instead of returning it to the pool.
func destroy(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Hijack().Close(ctx)
}
