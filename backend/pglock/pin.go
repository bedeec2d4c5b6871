package pglock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
)

// pinned is one held lock: the pool connection whose session holds it, kept
// out of the pool until the lock is unlocked or the connection destroyed.
//
// One goroutine at a time uses conn: the one that holds use's slot. Once the
// hold is armed, a watcher holds it while no call needs it and blocks reading
// the idle connection, so that a session the server ends
// (pg_terminate_backend, a shutdown, a cut connection) is noticed at once
// instead of at the next keepalive. A call that needs conn wakes the watcher
// with a read deadline in the past, which pgx reports as a timeout and
// survives. The keepalive loop arms a hold once it has lasted the watch delay
// (WithWatchDelay), so that a short hold starts no goroutine; a session that
// ended meanwhile is noticed when the watcher starts, whose first read fails
// at once.
type pinned struct {
	b          *Backend
	conn       *pgxpool.Conn
	key, token string
	id         int64
	fence      int64
	meta       []byte             // the holder row's metadata, encoded
	info       driver.Meta        // the same, for Inspect and List of this backend
	pid        uint32             // the session's backend pid
	lost       context.Context    // done when the hold ends without Release
	lose       context.CancelFunc // ends lost

	use chan struct{} // holding its one slot is the right to use conn

	wmu      sync.Mutex
	armed    bool // watch conn whenever no call needs it
	watching bool // a watcher holds use and reads conn
	waiters  int  // calls waiting for use

	// Under use:
	done     bool
	deadline time.Time // the lease: unlocked here unless renewed
	ttl      time.Duration

	due     time.Time // under b.mu: the next keepalive round; zero while one runs
	watchAt time.Time // under b.mu: when the keepalive loop arms p

	published  atomic.Bool  // the holder row is written
	deadlineNS atomic.Int64 // deadline, in Unix nanoseconds, for Inspect
}

// pin registers a granted lock, schedules its keepalive and the start of
// watching its connection (at once without a watch delay).
func (b *Backend) pin(conn *pgxpool.Conn, req driver.AcquireRequest, id, fence int64, sent time.Time, meta []byte) (driver.Grant, error) {
	p := &pinned{
		b: b, conn: conn, key: req.Key, token: req.Token, id: id, fence: fence, meta: meta, info: req.Meta,
		pid: conn.Conn().PgConn().PID(),
		use: make(chan struct{}, 1), deadline: sent.Add(req.TTL), ttl: req.TTL,
		armed: b.opts.watchDelay == 0,
	}
	p.published.Store(b.opts.rowMode() == rowsAtGrant)
	p.deadlineNS.Store(p.deadline.UnixNano())
	p.use <- struct{}{}
	p.lost, p.lose = context.WithCancel(context.Background())
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = p.endLocked(ctx)
		return driver.Grant{}, fmt.Errorf("pglock: acquire %q: %w", req.Key, driver.ErrClosed)
	}
	b.held[req.Token] = p
	if !p.armed {
		b.watchLaterLocked(p, b.opts.watchDelay)
	}
	b.scheduleLocked(p, sent.Add(p.interval()))
	b.mu.Unlock()
	p.unlock()
	return driver.Grant{Fence: uint64(fence), Lost: p.lost, Sent: sent}, nil
}

// cleanupTimeout bounds unlocks done on the backend's own behalf.
const cleanupTimeout = 5 * time.Second

// interval is the keepalive period: a third of the lease, capped. The caller
// holds use or owns p alone.
func (p *pinned) interval() time.Duration {
	return max(min(p.ttl/3, p.b.opts.keepalive), time.Millisecond)
}

// lock takes the right to use conn, waking the watcher if it holds it, or
// returns ctx's error once ctx ends first.
func (p *pinned) lock(ctx context.Context) error {
	select {
	case p.use <- struct{}{}:
		return nil
	default:
	}
	p.wmu.Lock()
	p.waiters++
	if p.watching {
		// A deadline in the past ends the watcher's read at once.
		_ = p.netConn().SetReadDeadline(time.Unix(1, 0))
	}
	p.wmu.Unlock()
	defer func() {
		p.wmu.Lock()
		p.waiters--
		p.wmu.Unlock()
	}()
	select {
	case p.use <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unlock gives up the right to use conn: to a new watcher while the lock is
// held and armed and no call waits for conn.
func (p *pinned) unlock() {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.handOffLocked()
}

// handOffLocked gives up use's slot, which the caller holds, as unlock does.
// The caller holds wmu, so that arm cannot miss it.
func (p *pinned) handOffLocked() {
	p.watching = p.armed && !p.done && p.waiters == 0
	if p.watching {
		go p.watch()
		return
	}
	<-p.use
}

// arm has conn watched whenever no call needs it, from now on: at once if no
// call uses it, else when the call that does gives it up. A hold whose row is
// written once it lasts (the default) writes it first, in a goroutine.
func (p *pinned) arm() {
	if p.b.opts.rowMode() == rowsLasting && !p.published.Load() {
		if p.b.enter() {
			go p.publishThenArm()
		}
		return
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.armed = true
	select {
	case p.use <- struct{}{}:
		p.handOffLocked()
	default: // its unlock starts the watcher, under wmu after this
	}
}

// publishThenArm writes the holder row of a hold that lasted the watch
// delay, on its connection, then arms the watch. A release meanwhile waits
// for the write (bounded by the request timeout); a hold that ended first
// writes nothing. A failed write leaves the hold without a row: Inspect and
// List of other processes then see it held without its fence and metadata.
func (p *pinned) publishThenArm() {
	defer p.b.wg.Done()
	_ = p.lock(context.Background()) // whoever holds conn is bounded by a request timeout
	if !p.done {
		if err := p.publishLocked(context.Background(), p.deadline); err != nil && p.conn.Conn().IsClosed() {
			p.dieLocked()
		}
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.armed = true
	p.handOffLocked()
}

// publishLocked writes the holder row, with the lease ending at deadline.
// The caller holds use.
func (p *pinned) publishLocked(ctx context.Context, deadline time.Time) error {
	ctx, cancel := p.statementContext(ctx)
	defer cancel()
	left := max(time.Until(deadline).Milliseconds(), 0)
	if _, err := p.conn.Exec(ctx, publishSQL, p.id, p.key, p.token, p.fence, left, p.meta); err != nil {
		return fmt.Errorf("pglock: holder row of %q: %w", p.key, err)
	}
	p.published.Store(true)
	return nil
}

// watch blocks reading the idle connection until a call wakes it or the
// server ends the session; the lock is then lost, and the hold ends at once.
func (p *pinned) watch() {
	pc := p.conn.Conn().PgConn()
	var err error
	for err == nil { // a notification (LISTEN on a pooled session): read on
		err = pc.WaitForNotification(context.Background())
	}
	p.wmu.Lock()
	p.watching = false
	p.wmu.Unlock()
	var ne net.Error
	if woken := errors.As(err, &ne) && ne.Timeout() && !pc.IsClosed(); woken {
		_ = p.netConn().SetReadDeadline(time.Time{})
	} else {
		p.dieLocked()
	}
	<-p.use
}

// netConn is the connection's socket.
func (p *pinned) netConn() net.Conn { return p.conn.Conn().PgConn().Conn() }

// tick runs one keepalive round, started by the keepalive loop: it confirms
// the session, or unlocks the key once the lease ran out without renewal.
func (p *pinned) tick() {
	if !p.b.enter() {
		return // Close unlocks every held key itself
	}
	defer p.b.wg.Done()
	_ = p.lock(context.Background()) // whoever holds conn is bounded by a request timeout
	defer p.unlock()
	if p.done {
		return
	}
	if time.Until(p.deadline) <= 0 {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		p.b.forget(p)
		_ = p.endLocked(ctx)
		p.lose()
		return
	}
	ctx, cancel := p.statementContext(context.Background())
	err := p.conn.Ping(ctx)
	cancel()
	if err != nil {
		p.dieLocked()
		return
	}
	p.b.mu.Lock()
	p.b.scheduleLocked(p, time.Now().Add(p.interval()))
	p.b.mu.Unlock()
}

// renew confirms the session and moves the lease. The statement runs to its
// end on conn even if ctx ends first, bounded by the request timeout: a
// statement cancelled midway makes pgx close the connection, which would end
// the session and with it the lock (a Release cancels a renewal in flight).
// renew itself returns when ctx ends.
func (p *pinned) renew(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	if !p.b.enter() {
		return fmt.Errorf("pglock: renew %q: %w", p.key, driver.ErrClosed)
	}
	if err := p.lock(ctx); err != nil {
		p.b.wg.Done()
		return fmt.Errorf("pglock: renew %q: %w", p.key, err)
	}
	res := make(chan error, 1)
	go func() {
		defer p.b.wg.Done()
		defer p.unlock()
		res <- p.renewLocked(context.WithoutCancel(ctx), sent, ttl)
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return fmt.Errorf("pglock: renew %q: %w", p.key, ctx.Err())
	}
}

// renewLocked runs the renewal sent at sent on conn.
func (p *pinned) renewLocked(ctx context.Context, sent time.Time, ttl time.Duration) error {
	if p.done || !sent.Before(p.deadline) {
		return fmt.Errorf("pglock: renew %q: %w", p.key, driver.ErrNotHeld)
	}
	ctx, cancel := p.statementContext(ctx)
	defer cancel()
	var err error
	switch {
	case p.b.opts.rowMode() == rowsNone:
		err = p.conn.Ping(ctx)
	case !p.published.Load(): // a hold renewed before its row was written writes it now
		err = p.publishLocked(ctx, sent.Add(ttl))
	default:
		_, err = p.conn.Exec(ctx, renewSQL, p.key, p.token, ttl.Milliseconds())
	}
	if err != nil {
		if p.conn.Conn().IsClosed() {
			p.dieLocked()
			return fmt.Errorf("pglock: renew %q: %w: the session ended: %w", p.key, driver.ErrNotHeld, err)
		}
		return fmt.Errorf("pglock: renew %q: %w", p.key, err)
	}
	p.deadline, p.ttl = sent.Add(ttl), ttl
	p.deadlineNS.Store(p.deadline.UnixNano())
	p.b.mu.Lock()
	if !p.due.IsZero() {
		// The renewal confirmed the session: the next keepalive round can
		// wait an interval from it, so that renewals on time leave the
		// connection to themselves. A shorter lease may end sooner.
		p.b.scheduleLocked(p, sent.Add(p.interval()))
	}
	p.b.mu.Unlock()
	return nil
}

// statementContext bounds a statement on the pinned connection while the
// lock is held. pgx closes a connection whose statement is cut short, which
// ends the session and frees the lock, so a statement is never cut before
// the lease ends, however slow the link: it has the request timeout beyond
// the lease's end (or beyond now, if later). A lock whose lease ran out
// during a slow statement is unlocked by the keepalive round that follows.
// The caller holds use.
func (p *pinned) statementContext(ctx context.Context) (context.Context, context.CancelFunc) {
	end := p.deadline
	if now := time.Now(); end.Before(now) {
		end = now
	}
	return context.WithDeadline(ctx, end.Add(p.b.opts.requestTimeout))
}

// release unlocks the key and gives the connection back. If ctx ends while
// another call uses the connection, the lock stays held and registered.
func (p *pinned) release(ctx context.Context) error {
	if err := p.lock(ctx); err != nil {
		return fmt.Errorf("pglock: release %q: %w", p.key, err)
	}
	defer p.unlock()
	if p.done {
		return fmt.Errorf("pglock: release %q: %w", p.key, driver.ErrNotHeld)
	}
	p.b.forget(p)
	return p.endLocked(ctx)
}

// endLocked unlocks the key and returns the connection to the pool, or
// destroys it if the unlock did not certainly succeed: a connection never goes
// back to the pool holding a lock. A destroyed session frees its locks.
func (p *pinned) endLocked(ctx context.Context) error {
	p.done = true // the keepalive loop no longer schedules p: it left b.held
	ctx, done := p.b.reqBound.within(ctx)
	defer done()
	var unlocked bool
	err := p.conn.QueryRow(ctx, releaseSQL, p.id).Scan(&unlocked)
	if err == nil && unlocked {
		p.conn.Release()
		return nil
	}
	destroy(p.conn)
	switch {
	case err == nil:
		return fmt.Errorf("pglock: release %q: %w: the session did not hold the lock", p.key, driver.ErrNotHeld)
	case ctx.Err() != nil:
		return fmt.Errorf("pglock: release %q: %w; the connection is closed, so the server frees the lock once it sees the session end", p.key, err)
	}
	return fmt.Errorf("pglock: release %q: %w: the session had ended: %w", p.key, driver.ErrNotHeld, err)
}

// dieLocked records that the session ended: the lock went with it.
func (p *pinned) dieLocked() {
	p.done = true
	destroy(p.conn)
	p.lose()
	p.b.forget(p)
}

// destroy closes a connection instead of returning it to the pool.
func destroy(conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Hijack().Close(ctx)
}
