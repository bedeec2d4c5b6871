package pinned

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// Conn is what a backend does on the pinned connection of one held lock: the
// statements of its store. The Hold calls them while it holds the right to
// use the connection (Lock), so one at a time.
type Conn interface {
	// Ping confirms that the session lives, in a keepalive round; the Conn
	// bounds ctx.
	Ping(ctx context.Context) error
	// Extend confirms the session and moves the lease in the store to ttl
	// from sent, when the renewal was sent; the Conn bounds ctx, which does
	// not end with the caller's: a statement cut short would make the
	// driver close the connection, and end the session.
	Extend(ctx context.Context, sent time.Time, ttl time.Duration) error
	// Free unlocks the lock on the session within ctx, which Bound gave,
	// and reports whether the session held it.
	Free(ctx context.Context) (bool, error)
	// Bound bounds ctx by the backend's request timeout; cancel releases it.
	Bound(ctx context.Context) (_ context.Context, cancel func())
	// Lives reports whether the session survived err, which a statement on
	// it returned: the server answered with an error that does not end it.
	Lives(err error) bool
	// Return gives the connection back to its pool.
	Return()
	// Destroy closes the connection instead of returning it to the pool,
	// which ends the session and frees its locks.
	Destroy()
}

// Watcher is a Conn that can watch its idle connection: block reading it,
// so that a session the server ends (a kill, a shutdown, a cut connection)
// is noticed at once instead of at the next keepalive round.
//
// Once a hold is armed, a watcher holds the right to use its connection
// whenever no call needs it; a call that needs it interrupts the watcher.
// The keepalive loop arms a hold once it has lasted the watch delay
// (Config.WatchDelay), so that a short hold starts no goroutine; a session
// that ended meanwhile is noticed when the watch starts, whose first read
// fails at once.
type Watcher interface {
	Conn
	// Await blocks reading the idle connection until Interrupt ends the
	// read, and then returns true, or until the session ends, and then
	// returns false.
	Await() bool
	// Interrupt ends an Await in progress at once.
	Interrupt()
	// Resume makes the connection usable again after Await returned true.
	// No Interrupt comes after it.
	Resume()
	// Lasted is called once the hold has lasted the watch delay: it arms
	// the hold (Hold.Arm), now or after work of its own.
	Lasted()
}

// Hold is one held lock: the connection whose session holds it, kept out of
// the pool until the lock is released or the connection destroyed. A
// backend's Conn embeds it, and Holds.Pin fills it in.
//
// One goroutine at a time uses the connection: the one that holds the right
// to (Lock).
type Hold[C Conn] struct {
	// Key and Token are the held lock's; Fence and Meta those of its grant.
	// They do not change once the hold is pinned.
	Key, Token string
	Fence      uint64
	Meta       driver.Meta

	conn  C
	holds *Holds[C]
	lost  context.Context    // done when the hold ends without Release
	lose  context.CancelFunc // ends lost

	use chan struct{} // holding its one slot is the right to use conn

	wmu      sync.Mutex
	armed    bool // watch conn whenever no call needs it
	watching bool // a watcher holds use and reads conn
	waiters  int  // calls waiting for use

	// Under use:
	done     bool
	deadline time.Time // the lease: released here unless renewed
	ttl      time.Duration

	due     time.Time // under holds.mu: the next keepalive round; zero while one runs
	watchAt time.Time // under holds.mu: when the keepalive loop arms h

	deadlineNS atomic.Int64 // deadline, in Unix nanoseconds, for Info
}

// interval is the keepalive period: a third of the lease, capped. The caller
// holds use or owns h alone.
func (h *Hold[C]) interval() time.Duration {
	return max(min(h.ttl/3, h.holds.cfg.Keepalive), time.Millisecond)
}

// Deadline is when the lease ends unless renewed. The caller holds Lock.
func (h *Hold[C]) Deadline() time.Time { return h.deadline }

// Ended reports whether the hold ended. The caller holds Lock.
func (h *Hold[C]) Ended() bool { return h.done }

// Info is what the backend knows of the hold.
func (h *Hold[C]) Info() driver.Info {
	ttl := max(time.Until(time.Unix(0, h.deadlineNS.Load())), 0)
	return driver.Info{Key: h.Key, Held: true, Fence: h.Fence, TTL: ttl, Meta: h.Meta}
}

// Lock takes the right to use the connection, interrupting its watcher if
// it holds it, or returns ctx's error once ctx ends first.
func (h *Hold[C]) Lock(ctx context.Context) error {
	select {
	case h.use <- struct{}{}:
		return nil
	default:
	}
	h.wmu.Lock()
	h.waiters++
	if h.watching {
		any(h.conn).(Watcher).Interrupt()
	}
	h.wmu.Unlock()
	defer func() {
		h.wmu.Lock()
		h.waiters--
		h.wmu.Unlock()
	}()
	select {
	case h.use <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Unlock gives up the right to use the connection: to a new watcher while
// the lock is held and armed and no call waits for the connection.
func (h *Hold[C]) Unlock() {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.handOffLocked()
}

// handOffLocked gives up use's slot, which the caller holds, as Unlock
// does. The caller holds wmu, so that Arm cannot miss it.
func (h *Hold[C]) handOffLocked() {
	h.watching = h.armed && !h.done && h.waiters == 0
	if h.watching {
		go h.watch()
		return
	}
	<-h.use
}

// Arm has the connection of a Watcher watched whenever no call needs it,
// from now on: at once if no call uses it, else when the call that does
// gives it up.
func (h *Hold[C]) Arm() {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	h.armed = true
	select {
	case h.use <- struct{}{}:
		h.handOffLocked()
	default: // its Unlock starts the watcher, under wmu after this
	}
}

// watch waits until a call interrupts the watcher or the server ends the
// session; the lock is then lost, and the hold ends at once.
func (h *Hold[C]) watch() {
	woken := any(h.conn).(Watcher).Await()
	h.wmu.Lock()
	h.watching = false
	h.wmu.Unlock()
	if woken {
		any(h.conn).(Watcher).Resume()
	} else {
		h.DieLocked()
	}
	<-h.use
}

// tick runs one keepalive round, started by the keepalive loop: it confirms
// the session, or releases the key once the lease ran out without renewal.
func (h *Hold[C]) tick() {
	s := h.holds
	if s.Enter() != nil {
		return // Close releases every held key itself
	}
	defer s.Leave()
	_ = h.Lock(context.Background()) // whoever holds conn is bounded by a request timeout
	defer h.Unlock()
	if h.done {
		return
	}
	if time.Until(h.deadline) <= 0 {
		ctx, cancel := context.WithTimeout(context.Background(), CleanupTimeout)
		defer cancel()
		s.forget(h)
		_ = h.endLocked(ctx)
		h.lose()
		return
	}
	if err := h.conn.Ping(context.Background()); err != nil {
		h.DieLocked()
		return
	}
	s.mu.Lock()
	s.scheduleLocked(h, time.Now().Add(h.interval()))
	s.mu.Unlock()
}

// Renew confirms the session and moves the lease. The statement runs to its
// end on the connection even if ctx ends first, bounded by the Conn: a
// statement cancelled midway makes the drivers close the connection, which
// would end the session and with it the lock (a Release cancels a renewal in
// flight). Renew itself returns when ctx ends.
func (h *Hold[C]) Renew(ctx context.Context, ttl time.Duration) error {
	sent := time.Now()
	s := h.holds
	if err := s.Enter(); err != nil {
		return err
	}
	if err := h.Lock(ctx); err != nil {
		s.Leave()
		return driver.Wrap(s.cfg.Name, err)
	}
	res := make(chan error, 1)
	go func() {
		defer s.Leave()
		defer h.Unlock()
		res <- h.renewLocked(context.WithoutCancel(ctx), sent, ttl)
	}()
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		return driver.Wrap(s.cfg.Name, ctx.Err())
	}
}

// renewLocked runs the renewal sent at sent on the connection.
func (h *Hold[C]) renewLocked(ctx context.Context, sent time.Time, ttl time.Duration) error {
	s := h.holds
	if h.done || !sent.Before(h.deadline) {
		return driver.ErrNotHeld
	}
	if err := h.conn.Extend(ctx, sent, ttl); err != nil {
		if !h.conn.Lives(err) {
			h.DieLocked()
			return fmt.Errorf("%w: the session ended: %w", driver.ErrNotHeld, err)
		}
		return driver.Wrap(s.cfg.Name, err)
	}
	h.deadline, h.ttl = sent.Add(ttl), ttl
	h.deadlineNS.Store(h.deadline.UnixNano())
	s.mu.Lock()
	if !h.due.IsZero() {
		// The renewal confirmed the session: the next keepalive round can
		// wait an interval from it, so that renewals on time leave the
		// connection to themselves. A shorter lease may end sooner.
		s.scheduleLocked(h, sent.Add(h.interval()))
	}
	s.mu.Unlock()
	return nil
}

// Release unlocks the key and gives the connection back. If ctx ends while
// another call uses the connection, the lock stays held and registered.
func (h *Hold[C]) Release(ctx context.Context) error {
	if err := h.Lock(ctx); err != nil {
		return driver.Wrap(h.holds.cfg.Name, err)
	}
	defer h.Unlock()
	if h.done {
		return driver.ErrNotHeld
	}
	h.holds.forget(h)
	return h.endLocked(ctx)
}

// endLocked unlocks the key and returns the connection to the pool, or
// destroys it if the unlock did not certainly succeed: a connection never
// goes back to the pool holding a lock. A destroyed session frees its locks.
func (h *Hold[C]) endLocked(ctx context.Context) error {
	h.done = true // the keepalive loop no longer schedules h: it left the table
	ctx, cancel := h.conn.Bound(ctx)
	defer cancel()
	freed, err := h.conn.Free(ctx)
	if err == nil && freed {
		h.conn.Return()
		return nil
	}
	lives := err != nil && h.conn.Lives(err)
	h.conn.Destroy()
	switch {
	case err == nil:
		return fmt.Errorf("%w: the session did not hold the lock", driver.ErrNotHeld)
	case lives || ctx.Err() != nil:
		return fmt.Errorf("%w; the connection is closed, so the server frees the lock once it sees the session end",
			driver.Wrap(h.holds.cfg.Name, err))
	}
	return fmt.Errorf("%w: the session had ended: %w", driver.ErrNotHeld, err)
}

// DieLocked records that the session ended: the lock went with it. The
// caller holds Lock.
func (h *Hold[C]) DieLocked() {
	h.done = true
	h.conn.Destroy()
	h.lose()
	h.holds.forget(h)
}

// EndLocked ends the hold, which the caller releases itself on the
// connection: the keepalive no longer runs for it. The caller holds Lock.
func (h *Hold[C]) EndLocked() {
	h.holds.forget(h)
	h.done = true
}
