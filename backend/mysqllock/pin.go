package mysqllock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock/driver"
)

// pinned is one held lock: the connection whose session holds it, kept out
// of the pool until RELEASE_LOCK freed it, or closed. One goroutine at a
// time uses conn: the one that holds use's slot.
type pinned struct {
	b          *Backend
	conn       *sql.Conn
	key, token string
	name       string
	fence      uint64
	info       driver.Meta
	lost       context.Context    // done when the hold ends without Release
	lose       context.CancelFunc // ends lost

	use chan struct{} // holding its one slot is the right to use conn

	// Under use:
	done     bool
	deadline time.Time // the lease: released here unless renewed
	ttl      time.Duration
	timer    *time.Timer // the next keepalive round

	deadlineNS atomic.Int64 // deadline, in Unix nanoseconds, for Inspect
}

// pin registers a granted lock and schedules its keepalive.
func (b *Backend) pin(conn *sql.Conn, req driver.AcquireRequest, name string, fence uint64, sent time.Time) (driver.Grant, error) {
	p := &pinned{
		b: b, conn: conn, key: req.Key, token: req.Token, name: name, fence: fence, info: req.Meta,
		use: make(chan struct{}, 1), deadline: sent.Add(req.TTL), ttl: req.TTL,
	}
	p.deadlineNS.Store(p.deadline.UnixNano())
	p.lost, p.lose = context.WithCancel(context.Background())
	p.use <- struct{}{}
	defer p.unlock()
	p.timer = time.AfterFunc(p.nextRound(sent), p.tick)
	b.mu.Lock()
	if b.closed.Load() {
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = p.endLocked(ctx)
		return driver.Grant{}, fmt.Errorf("mysqllock: acquire %q: %w", req.Key, driver.ErrClosed)
	}
	b.held[req.Token] = p
	b.mu.Unlock()
	return driver.Grant{Fence: fence, Lost: p.lost, Sent: sent}, nil
}

// nextRound is how long after now the keepalive round after one at from
// runs: a third of the lease, at most WithKeepalive, no later than the end
// of the lease. The caller holds use.
func (p *pinned) nextRound(from time.Time) time.Duration {
	at := from.Add(max(min(p.ttl/3, p.b.opts.keepalive), time.Millisecond))
	if p.deadline.Before(at) {
		at = p.deadline
	}
	return time.Until(at)
}

// lock takes the right to use conn, or returns ctx's error once ctx ends
// first.
func (p *pinned) lock(ctx context.Context) error {
	select {
	case p.use <- struct{}{}:
		return nil
	default:
	}
	select {
	case p.use <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unlock gives up the right to use conn.
func (p *pinned) unlock() { <-p.use }

// tick runs one keepalive round: it confirms the session, or releases the
// key once the lease ran out without renewal.
func (p *pinned) tick() {
	if p.b.enter("keepalive", p.key) != nil {
		return // Close releases every held key itself
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
	// A ping slower than this means a dead or unreachable session. At least a
	// second, so that a busy machine does not end a healthy hold.
	ctx, cancel := context.WithTimeout(context.Background(), max(p.b.opts.keepalive, time.Second))
	err := p.conn.PingContext(ctx)
	cancel()
	if err != nil {
		p.dieLocked()
		return
	}
	p.timer.Reset(p.nextRound(time.Now()))
}

// renew confirms the session and moves the lease. The statement runs to its
// end on conn even if ctx ends first, bounded by the request timeout: the
// driver closes a connection whose statement is cancelled midway, which
// would end the session and with it the lock. renew itself returns when ctx
// ends.
func (p *pinned) renew(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	if err := p.b.enter("renew", p.key); err != nil {
		return err
	}
	if err := p.lock(ctx); err != nil {
		p.b.wg.Done()
		return fmt.Errorf("mysqllock: renew %q: %w", p.key, err)
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
		return fmt.Errorf("mysqllock: renew %q: %w", p.key, ctx.Err())
	}
}

// renewLocked runs the renewal sent at sent on conn.
func (p *pinned) renewLocked(ctx context.Context, sent time.Time, ttl time.Duration) error {
	if p.done || !sent.Before(p.deadline) {
		return fmt.Errorf("mysqllock: renew %q: %w", p.key, driver.ErrNotHeld)
	}
	ctx, cancel := context.WithTimeout(ctx, p.b.opts.requestTimeout)
	defer cancel()
	if _, err := p.conn.ExecContext(ctx, renewSQL, ttl.Microseconds(), p.name, p.token); err != nil {
		if !sessionLives(err) {
			p.dieLocked()
			return fmt.Errorf("mysqllock: renew %q: %w: the session ended: %w", p.key, driver.ErrNotHeld, err)
		}
		return fmt.Errorf("mysqllock: renew %q: %w", p.key, err)
	}
	p.deadline, p.ttl = sent.Add(ttl), ttl
	p.deadlineNS.Store(p.deadline.UnixNano())
	p.timer.Reset(p.nextRound(sent))
	return nil
}

// release frees the key and gives the connection back. If ctx ends while
// another call uses the connection, the lock stays held and registered.
func (p *pinned) release(ctx context.Context) error {
	if err := p.lock(ctx); err != nil {
		return fmt.Errorf("mysqllock: release %q: %w", p.key, err)
	}
	defer p.unlock()
	if p.done {
		return fmt.Errorf("mysqllock: release %q: %w", p.key, driver.ErrNotHeld)
	}
	p.b.forget(p)
	return p.endLocked(ctx)
}

// endLocked frees the named lock and returns the connection to the pool, or
// closes it if the release did not certainly succeed: a connection never
// goes back to the pool holding a lock. A closed session frees its locks.
func (p *pinned) endLocked(ctx context.Context) error {
	p.done = true
	p.timer.Stop()
	ctx, cancel := context.WithTimeout(ctx, p.b.opts.requestTimeout)
	defer cancel()
	var freed sql.NullInt64
	err := p.conn.QueryRowContext(ctx, releaseSQL, p.name).Scan(&freed)
	if err == nil && freed.Int64 == 1 {
		_ = p.conn.Close()
		return nil
	}
	destroy(p.conn)
	switch {
	case err == nil:
		return fmt.Errorf("mysqllock: release %q: %w: the session did not hold the lock", p.key, driver.ErrNotHeld)
	case sessionLives(err) || ctx.Err() != nil:
		return fmt.Errorf("mysqllock: release %q: %w; the connection is closed, so the server frees the lock once it sees the session end", p.key, err)
	}
	return fmt.Errorf("mysqllock: release %q: %w: the session had ended: %w", p.key, driver.ErrNotHeld, err)
}

// dieLocked records that the session ended: the lock went with it.
func (p *pinned) dieLocked() {
	p.done = true
	p.timer.Stop()
	destroy(p.conn)
	p.lose()
	p.b.forget(p)
}

// destroy closes conn instead of returning it to the pool: database/sql
// discards a connection whose Raw callback reports driver.ErrBadConn, and
// the driver's close ends the session (COM_QUIT), which frees its locks.
func destroy(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	_ = conn.Close()
}

// Server errors after which the session is gone.
var sessionEndedCodes = map[uint16]bool{
	1053: true, // ER_SERVER_SHUTDOWN
	1927: true, // ER_CONNECTION_KILLED (MariaDB)
	3169: true, // ER_SESSION_WAS_KILLED (MySQL)
	4031: true, // ER_CLIENT_INTERACTION_TIMEOUT (MySQL: wait_timeout)
}

// sessionLives reports whether the session survived err: the server
// answered with an error that does not end it. Any other error (a broken or
// closed connection, a cancelled statement, whose connection the driver
// closes) means the session, and every named lock it held, is gone or going.
func sessionLives(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && !sessionEndedCodes[me.Number]
}
