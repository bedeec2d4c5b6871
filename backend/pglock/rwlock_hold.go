package pglock

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/pinned"
)

// What read-write locks and semaphores share: their tables, holds pinned as
// locks are, their own unlock statements, and release notices.

//go:embed sql/rwsem_migrate.sql
var rwsemMigrateSQL string

// withTables runs f, which uses the tables of read-write locks and
// semaphores, after the schema was migrated once; if a table is missing
// all the same (undefined_table, raised before a statement runs: dropped
// since, or made by an earlier version's Migrate) it migrates again and runs
// f again. So the common call costs no check.
func (b *Backend) withTables(ctx context.Context, f func() error) error {
	if err := b.ensureSchema(ctx); err != nil {
		return err
	}
	err := f()
	if pe := (*pgconn.PgError)(nil); !errors.As(err, &pe) || pe.Code != "42P01" {
		return err
	}
	if err := b.Migrate(ctx); err != nil {
		return err
	}
	return f()
}

// rowName is name as the tables and notices of read-write locks and
// semaphores carry it: under WithNamespace, the namespace, a control
// character (which no name has) and name, so that applications sharing a
// database keep their intents, limits and holds apart, as their advisory
// locks are.
func (b *Backend) rowName(name string) string {
	if b.opts.ns == nil {
		return name
	}
	return strconv.Itoa(int(*b.opts.ns)) + "\x1f" + name
}

// holdMeta encodes a hold's metadata for its row.
func holdMeta(m driver.Meta) ([]byte, error) {
	if m.Owner == "" && m.BusinessID == "" && len(m.Labels) == 0 {
		return emptyMeta, nil
	}
	return json.Marshal(m)
}

// holdKey is the key under which the backend keeps a read-write lock's or a
// semaphore's hold of name among its pinned connections: never a lock's
// key, which cannot contain a control character, so a lock's Renew, Release
// and Inspect never meet it. Not NUL, which PostgreSQL refuses in text: a
// renewal sends the key.
func holdKey(kind, name string) string { return "\x1f" + kind + "\x1f" + name }

// tryHold makes one attempt to take a hold (what, in errors) with q, which returns the fence
// as its only column and no row if the hold was refused, on a connection
// it pins as a lock's if the hold is granted. id is what the keepalive
// unlocks with pg_advisory_unlock when the lease runs out: for a hold that
// is not an exclusive lock on id, that unlock fails and the session is
// ended, which frees the hold all the same.
func (b *Backend) tryHold(ctx context.Context, req driver.AcquireRequest, kind string, id int64, q string, args ...any) (driver.Grant, error) {
	conn, err := b.conn(ctx, &b.poolBound)
	if err != nil {
		return driver.Grant{}, err
	}
	qctx, done := b.reqBound.within(ctx)
	sent := time.Now()
	var fence int64
	err = conn.QueryRow(qctx, q, args...).Scan(&fence)
	done()
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		conn.Release() // not taken: the session holds nothing
		return driver.Grant{}, driver.ErrNotAcquired
	case err != nil:
		destroy(conn) // the hold may have been taken: end the session
		return driver.Grant{}, driver.Wrap("pglock", err)
	}
	return b.pinHold(conn, req, kind, id, fence, sent)
}

// pinHold pins conn, whose session holds req's hold, under holdKey. The
// hold's row was written with the grant, so none is published for it.
func (b *Backend) pinHold(conn *pgxpool.Conn, req driver.AcquireRequest, kind string, id, fence int64, sent time.Time) (driver.Grant, error) {
	req.Key = holdKey(kind, req.Key)
	g, err := b.pin(conn, req, id, fence, sent, nil)
	if err != nil {
		return driver.Grant{}, err
	}
	if p := b.holds.Lookup(req.Key, req.Token); p != nil {
		p.published.Store(true)
	}
	return g, nil
}

// renewHold confirms the session of token's hold of name and moves its
// lease, then the row's time to live with q on the same session (the row
// only describes the hold: a failure there leaves it renewed, and a session
// found ended there loses it, as a renewal would).
func (b *Backend) renewHold(ctx context.Context, kind, name, token string, ttl time.Duration, q string) error {
	if err := b.holds.ClosedError(); err != nil {
		return err
	}
	p := b.holds.Lookup(holdKey(kind, name), token)
	if p == nil {
		return driver.ErrNotHeld
	}
	if err := p.Renew(ctx, ttl); err != nil {
		return err
	}
	if p.Lock(ctx) != nil {
		return nil
	}
	defer p.Unlock()
	if p.Ended() {
		return nil
	}
	// Not cancelled midway: pgx would close the connection, and the hold.
	qctx, done := b.reqBound.within(context.WithoutCancel(ctx))
	defer done()
	if _, err := p.conn.Exec(qctx, q, b.rowName(name), token, ttl.Milliseconds()); err != nil && p.conn.Conn().IsClosed() {
		p.DieLocked()
	}
	return nil
}

// releaseHold frees token's hold of name with q and the arguments args
// gives for the hold, which unlocks it on the pinned session and returns
// whether it did, and gives the connection back (or destroys it if the
// unlock did not certainly succeed: a pooled connection never carries a
// hold).
func (b *Backend) releaseHold(ctx context.Context, kind, name, token string, q string, args func(p *session) []any) error {
	if err := b.holds.ClosedError(); err != nil {
		return err
	}
	p := b.holds.Lookup(holdKey(kind, name), token)
	if p == nil {
		return driver.ErrNotHeld
	}
	if err := p.Lock(ctx); err != nil {
		return driver.Wrap("pglock", err)
	}
	defer p.Unlock()
	if p.Ended() {
		return driver.ErrNotHeld
	}
	p.EndLocked()
	qctx, done := b.reqBound.within(ctx)
	defer done()
	var unlocked bool
	err := p.conn.QueryRow(qctx, q, args(p)...).Scan(&unlocked)
	if err == nil && unlocked {
		p.conn.Release()
		return nil
	}
	destroy(p.conn)
	if err == nil {
		return fmt.Errorf("%w: the session did not hold it", driver.ErrNotHeld)
	}
	return fmt.Errorf("%w; the connection is closed, so the server frees the hold once it sees the session end", driver.Wrap("pglock", err))
}

// watchChannel returns a channel that fires when a notice on the
// PostgreSQL channel carries name, listening on a connection of the pool of
// its own until stop: a waiter of the client is the only one of its handle
// to watch a name at a time. It returns once LISTEN is in effect, so that no
// notice after it is missed. It waits for a free connection as an attempt
// does (WithPoolWait); the client polls instead if none comes. If the
// connection fails, or the backend closes, the channel fires and the
// client's poll takes over.
func (b *Backend) watchChannel(ctx context.Context, channel, name string) (<-chan struct{}, func(), error) {
	if err := b.holds.ClosedError(); err != nil {
		return nil, nil, err
	}
	conn, err := b.conn(ctx, &b.poolBound)
	if err != nil {
		return nil, nil, err
	}
	qctx, done := b.reqBound.within(ctx)
	_, err = conn.Exec(qctx, "LISTEN "+channel)
	done()
	if err != nil {
		destroy(conn) // the LISTEN may be in effect
		return nil, nil, driver.Wrap("pglock", err)
	}
	w := &listener{b: b, conn: conn, name: b.rowName(name), wake: make(chan struct{}, 1), exited: make(chan struct{})}
	go w.run()
	return w.wake, w.stop, nil
}

// closedLook is how often an open watch looks whether its backend closed:
// Close does not wait for watches, and a pool that Open created closes only
// once every connection is back.
const closedLook = time.Second

// listener delivers one name's notices to one waiter.
type listener struct {
	b      *Backend
	conn   *pgxpool.Conn
	name   string
	wake   chan struct{}
	exited chan struct{}

	mu      sync.Mutex
	stopped bool // under mu, as the read deadline: stop's is never overwritten, nor set once run ends
}

// run reads notices until stop, the backend's Close or a failure of the
// connection; stopped, it gives the connection back without its LISTEN,
// otherwise it destroys it.
func (w *listener) run() {
	defer close(w.exited)
	for {
		w.mu.Lock()
		if !w.stopped {
			_ = w.netConn().SetReadDeadline(time.Now().Add(closedLook))
		}
		w.mu.Unlock()
		n, err := w.conn.Conn().WaitForNotification(context.Background())
		if err == nil {
			if n.Payload == w.name {
				w.notify()
			}
			continue
		}
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout() && !w.conn.Conn().IsClosed()
		closed := w.b.holds.Closed()
		w.mu.Lock()
		stopped := w.stopped
		ending := !timeout || stopped || closed
		w.stopped = w.stopped || ending // from here stop leaves the connection alone
		w.mu.Unlock()
		if !ending {
			continue
		}
		if timeout && !closed {
			_ = w.netConn().SetReadDeadline(time.Time{})
			ctx, cancel := context.WithTimeout(context.Background(), pinned.CleanupTimeout)
			_, err = w.conn.Exec(ctx, "UNLISTEN *")
			cancel()
			if err == nil {
				w.conn.Release()
				return
			}
		}
		w.notify() // the waiter looks again
		destroy(w.conn)
		return
	}
}

func (w *listener) notify() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake is pending already
	}
}

func (w *listener) netConn() net.Conn { return w.conn.Conn().PgConn().Conn() }

// stop ends the read with a deadline in the past, which pgx reports as a
// timeout and survives, and waits for run to give the connection back.
func (w *listener) stop() {
	w.mu.Lock()
	if !w.stopped {
		w.stopped = true
		_ = w.netConn().SetReadDeadline(time.Unix(1, 0))
	}
	w.mu.Unlock()
	<-w.exited
}
