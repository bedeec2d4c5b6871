package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// On PostgreSQL, clients that wait for a key queue for it in the database,
// so that a release wakes one client, not every client that waits, and
// clients are served in the order they began to wait. The queue is the
// session advisory lock (queueClass, hashtext(key)): a backend whose waiter
// calls Watch takes it on a connection of its own, in PostgreSQL's lock
// queue, and Watch returns once it holds it; the backend is then the head,
// its waiter the only one listening for the key's release notices, and its
// acquisitions skip the queue check (acquire_queued.sql). Every other
// acquisition of the key fails while anyone holds or waits for the queue lock
// (acquire.sql's shared try-lock), so nobody barges in. The head gives its
// place up once its waiter leaves, granted or not (the lock is unlocked in
// the background, or the connection closed, which frees it too); a process
// that dies gives it up with its session.
//
// A connection dropped while its session may hold or wait for the lock (a
// wait that ended inside pg_advisory_lock, an unlock that failed) frees it
// only once the server ends the session. pgx asks for that in the
// background (a cancel request, then Terminate), and a session that waits
// for a lock does not notice by itself that its client left: meanwhile it
// keeps its place, or is granted it, and the backend's own next attempt
// would fail as a barge-in. So the backend ends the session itself
// (queue_abandoned.sql) and counts the place as being given up until the
// server shows the session gone.
//
// The hard truth: a head whose process freezes, with its connection open,
// holds the queue until it resumes or the server sees the connection die
// (tcp_keepalives_idle), and meanwhile no other client takes the key, even
// once its lease ran out. A client in the queue keeps one connection of its
// pool for it.

// queueClass is the classid of the queue locks ("sqlq").
const queueClass = 1936813169

// queue records the keys this backend heads the queue of, and the places
// it is giving up.
type queue struct {
	mu        sync.Mutex
	byKey     map[string]int      // places held, by key
	held      map[*place]struct{} // places held, for Close to give up
	unlocking pending             // places being given up
	conns     int                 // connections taken for places: waiting, held or being given up
}

// place is a backend's place at the head of key's queue: the session lock
// held on conn, whose session is the server process pid.
type place struct {
	key  string
	conn *sql.Conn
	pid  uint32
	once sync.Once // gives it up
}

// settled returns once this backend gives up no place in key's queue, or
// when ctx ends: a release waits for it, so that a key released after a
// wait is free to every client when Release returns, not only once the
// place it waited in is given up in the background.
func (q *queue) settled(ctx context.Context, key string) {
	q.unlocking.wait(ctx, key)
}

// heads reports whether this backend heads key's queue.
func (q *queue) heads(key string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byKey[key] > 0
}

// join takes a place in key's queue and returns once it is at the head, or
// when ctx ends or the backend closes. leave gives the place up. Without
// release notices (MariaDB) there is no queue, and join returns at once; so
// it does when a place's connection would leave the database handle none
// for the attempts, besides the listener's (limit, its MaxOpenConns, 0 for
// none): the waiter then waits on release notices alone.
func (q *queue) join(ctx context.Context, b *Backend, key string, limit int) (leave func(), err error) {
	if !b.d.notifies || b.opts.noQueue || !q.takeConn(limit) {
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel) // Close ends the wait
	defer stop()
	conn, err := b.db.Conn(ctx)
	if err != nil {
		q.giveConn()
		return nil, err
	}
	pid := backendPID(conn)
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1, hashtext($2))", queueClass, key); err != nil {
		// The session may wait on, or have been granted the lock as the
		// wait ended.
		discard(conn)
		q.giveConn()
		q.abandoned(b, key, pid)
		return nil, err
	}
	p := &place{key: key, conn: conn, pid: pid}
	q.mu.Lock()
	if q.byKey == nil {
		q.byKey, q.held = make(map[string]int), make(map[*place]struct{})
	}
	q.byKey[key]++
	q.held[p] = struct{}{}
	q.mu.Unlock()
	return func() { q.giveUp(b, p) }, nil
}

// giveUp gives p up, once: in the background unless Close has begun, so
// that a grant does not wait for it (Close waits for it), and at once
// after, before Close closes the database handle.
func (q *queue) giveUp(b *Backend, p *place) {
	p.once.Do(func() {
		q.mu.Lock()
		if q.byKey[p.key]--; q.byKey[p.key] == 0 {
			delete(q.byKey, p.key)
		}
		delete(q.held, p)
		q.mu.Unlock()
		q.unlocking.start(p.key)
		unlock := func() {
			defer q.unlocking.end(p.key)
			defer q.giveConn()
			ctx, cancel := context.WithTimeout(context.Background(), b.opts.requestTimeout)
			defer cancel()
			var unlocked bool
			err := p.conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1, hashtext($2))", queueClass, p.key).Scan(&unlocked)
			if err != nil || !unlocked {
				discard(p.conn)
				if err != nil { // the session may hold the lock still
					q.awaitEnded(b, p.key, p.pid)
				}
				return
			}
			_ = p.conn.Close()
		}
		if !b.background(unlock) {
			unlock()
		}
	})
}

// abandoned counts a place in key's queue as being given up while the
// session pid, whose connection join dropped, may still hold or wait for
// it: until the server shows the session gone.
func (q *queue) abandoned(b *Backend, key string, pid uint32) {
	if pid == 0 {
		return
	}
	q.unlocking.start(key)
	end := func() {
		defer q.unlocking.end(key)
		q.awaitEnded(b, key, pid)
	}
	if !b.background(end) {
		end()
	}
}

// awaitEnded waits until the server shows that the session pid, whose
// connection was dropped, has ended, and ends it meanwhile if it holds or
// waits for key's queue lock. It gives up after the request timeout, and
// at Close. A pid of 0 (a driver other than pgx) is not waited for.
func (q *queue) awaitEnded(b *Backend, key string, pid uint32) {
	if pid == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.requestTimeout)
	defer cancel()
	for wait := time.Millisecond; ctx.Err() == nil; wait = min(2*wait, 50*time.Millisecond) {
		var (
			running bool
			ended   int64
		)
		err := b.scanRow(ctx, func(r *sql.Row) error { return r.Scan(&running, &ended) }, b.d.queueAbandoned, key, int64(pid))
		if err == nil && !running {
			return
		}
		t := time.NewTimer(wait) // the server ends a session in a few ms
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// close gives up every place still held; Close calls it before it closes
// the database handle, which the places' unlocks need.
func (q *queue) close(b *Backend) {
	q.mu.Lock()
	held := make([]*place, 0, len(q.held))
	for p := range q.held {
		held = append(held, p)
	}
	q.mu.Unlock()
	for _, p := range held {
		q.giveUp(b, p)
	}
}

// takeConn counts a connection taken for a place if, with it, the
// listener's and one for the attempts, the handle's limit allows it.
func (q *queue) takeConn(limit int) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if limit > 0 && q.conns+3 > limit {
		return false
	}
	q.conns++
	return true
}

// giveConn counts a place's connection given back.
func (q *queue) giveConn() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.conns--
}

// discard closes conn's session instead of returning it to the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// backendPID returns the server process of conn's session, or 0 if its
// driver is not pgx.
func backendPID(conn *sql.Conn) (pid uint32) {
	_ = conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok {
			pid = c.Conn().PgConn().PID()
		}
		return nil
	})
	return pid
}
