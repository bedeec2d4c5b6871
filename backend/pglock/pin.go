package pglock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
)

// pinned is one held lock: the pool connection whose session holds it, kept
// out of the pool until the lock is unlocked or the connection destroyed.
type pinned struct {
	b          *Backend
	conn       *pgxpool.Conn
	key, token string
	id         int64
	lost       context.Context    // done when the hold ends without Release
	lose       context.CancelFunc // ends lost

	mu       sync.Mutex // serialises every use of conn
	done     bool
	deadline time.Time // the lease: unlocked here unless renewed
	ttl      time.Duration

	due time.Time // under b.mu: the next keepalive round; zero while one runs
}

// pin registers a granted lock and schedules its keepalive.
func (b *Backend) pin(conn *pgxpool.Conn, req driver.AcquireRequest, id, fence int64, sent time.Time) (driver.Grant, error) {
	p := &pinned{
		b: b, conn: conn, key: req.Key, token: req.Token, id: id,
		deadline: sent.Add(req.TTL), ttl: req.TTL,
	}
	p.lost, p.lose = context.WithCancel(context.Background())
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = p.release(ctx)
		return driver.Grant{}, fmt.Errorf("pglock: acquire %q: %w", req.Key, driver.ErrClosed)
	}
	b.held[req.Token] = p
	b.scheduleLocked(p, sent.Add(p.interval()))
	b.mu.Unlock()
	return driver.Grant{Fence: uint64(fence), Lost: p.lost, Sent: sent}, nil
}

// cleanupTimeout bounds unlocks done on the backend's own behalf.
const cleanupTimeout = 5 * time.Second

// interval is the keepalive period: a third of the lease, capped. The caller
// holds mu or owns p alone.
func (p *pinned) interval() time.Duration {
	return max(min(p.ttl/3, p.b.opts.keepalive), time.Millisecond)
}

// tick runs one keepalive round, started by the keepalive loop: it confirms
// the session, or unlocks the key once the lease ran out without renewal.
func (p *pinned) tick() {
	if !p.b.enter() {
		return // Close unlocks every held key itself
	}
	defer p.b.wg.Done()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	left := time.Until(p.deadline)
	if left <= 0 {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		p.endLocked(ctx)
		p.lose()
		p.b.forget(p)
		return
	}
	// A ping slower than this means a dead or unreachable session. At least a
	// second, so that a busy machine does not end a healthy hold.
	ctx, cancel := context.WithTimeout(context.Background(), max(p.interval(), time.Second))
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

// renew confirms the session and moves the lease.
func (p *pinned) renew(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done || !sent.Before(p.deadline) {
		return fmt.Errorf("pglock: renew %q: %w", p.key, driver.ErrNotHeld)
	}
	var err error
	if p.b.opts.noRows {
		err = p.conn.Ping(ctx)
	} else {
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
	p.b.mu.Lock()
	if !p.due.IsZero() { // a shorter lease may end before the next round
		p.b.scheduleLocked(p, p.due)
	}
	p.b.mu.Unlock()
	return nil
}

// release unlocks the key and gives the connection back.
func (p *pinned) release(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return fmt.Errorf("pglock: release %q: %w", p.key, driver.ErrNotHeld)
	}
	p.endLocked(ctx)
	return nil
}

// endLocked unlocks the key and returns the connection to the pool, or
// destroys it if the unlock did not certainly succeed: a connection never goes
// back to the pool holding a lock. A destroyed session frees its locks.
func (p *pinned) endLocked(ctx context.Context) {
	p.done = true // the keepalive loop no longer schedules p: it left b.held
	var unlocked bool
	if err := p.conn.QueryRow(ctx, releaseSQL, p.id).Scan(&unlocked); err != nil || !unlocked {
		destroy(p.conn)
		return
	}
	p.conn.Release()
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
