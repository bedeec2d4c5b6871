// Package pinned holds locks that live as long as the database session that
// took them, such as PostgreSQL advisory locks and MySQL named locks: each
// held lock keeps its connection out of the pool, pinned, until it is
// released, and a pooled connection never carries a lock.
//
// A backend implements Conn, the statements of its store on one pinned
// connection, in a type that embeds Hold; Holds does the rest once for every
// such backend: the table of held locks by token, the right to use a held
// lock's connection, keepalive rounds from one loop, the lease the backend
// enforces, the renewal and release shapes, closing, and for a Conn that
// can watch its idle connection (Watcher), noticing at once that the server
// ended its session.
package pinned

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock/driver"
)

// CleanupTimeout bounds work a backend does on its own behalf: releases when
// it closes or when a lease ran out, the end of a wait.
const CleanupTimeout = 5 * time.Second

// ErrSessionEnded marks a wait whose session the server ended: the backend
// waits on, on a new session.
var ErrSessionEnded = errors.New("the waiting session ended")

// Config is what Holds needs of a backend.
type Config struct {
	// Name is the backend's package name, which begins every error of its
	// store that matches no sentinel (see driver.Wrap).
	Name string
	// Keepalive caps the interval of a held lock's keepalive rounds, which
	// is a third of its lease otherwise.
	Keepalive time.Duration
	// WatchDelay is how long a hold whose Conn is a Watcher goes unwatched
	// after its grant; 0 watches from the grant.
	WatchDelay time.Duration
}

// Holds is a backend's table of held locks, by key and token, with their
// keepalive loop and the work the backend does in the background.
type Holds[C Conn] struct {
	cfg    Config
	closed atomic.Bool // set under mu by Close: Enter fails from then on

	mu        sync.Mutex
	held      map[holdID]*Hold[C]
	kaRunning bool           // the keepalive loop runs
	kaNext    time.Time      // when the keepalive loop looks next
	kaDue     time.Time      // no keepalive round is due before; zero: look
	kaWake    chan struct{}  // wakes the keepalive loop early
	fresh     []*Hold[C]     // held locks not yet armed, in the order taken
	tookLock  bool           // a lock was taken since the loop last looked
	wg        sync.WaitGroup // work entered, the keepalive loop and rounds, the cleanup loop

	stopCleanup context.CancelFunc
}

// New returns an empty table.
func New[C Conn](cfg Config) *Holds[C] {
	return &Holds[C]{cfg: cfg, held: make(map[holdID]*Hold[C]), kaWake: make(chan struct{}, 1)}
}

// holdID names a held lock: its key and its token. A token names one
// acquisition, but a caller may take two keys under one, which must not
// hide each other.
type holdID struct{ key, token string }

// Closed reports whether Close was called.
func (s *Holds[C]) Closed() bool { return s.closed.Load() }

// ClosedError is driver.ErrClosed once Close was called, else nil. Like
// every error of Holds, it names neither the operation nor the key, which
// the client names (see driver.Backend).
func (s *Holds[C]) ClosedError() error {
	if !s.closed.Load() {
		return nil
	}
	return driver.ErrClosed
}

// Enter registers an operation, or work in the background, so that Close
// waits for it, unless Close was called: it then returns ClosedError. The
// caller calls Leave when the work ends.
func (s *Holds[C]) Enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		return driver.ErrClosed
	}
	s.wg.Add(1)
	return nil
}

// Leave ends work that Enter registered.
func (s *Holds[C]) Leave() { s.wg.Done() }

// Lookup returns the held lock of token if it holds key, else the zero C.
func (s *Holds[C]) Lookup(key, token string) C {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.held[holdID{key, token}]; h != nil {
		return h.conn
	}
	var none C
	return none
}

// Range calls f for each held lock, until f returns false. f must not call
// the other methods of s.
func (s *Holds[C]) Range(f func(C) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.held {
		if !f(h.conn) {
			return
		}
	}
}

// PoolExhausted is the error of an acquisition that found no free
// connection among the max of its pool (err is the pool's): it starts with
// sentinel, the backend's error for it, and says how many the backend's
// held locks pin.
func (s *Holds[C]) PoolExhausted(sentinel error, max int, err error) error {
	s.mu.Lock()
	n := len(s.held)
	s.mu.Unlock()
	return fmt.Errorf("%w: all %d connections in use, %d pinned by locks this backend holds: %w",
		sentinel, max, n, err)
}

// forget drops h from the table once its lock ends.
func (s *Holds[C]) forget(h *Hold[C]) {
	s.mu.Lock()
	if id := (holdID{h.Key, h.Token}); s.held[id] == h {
		delete(s.held, id)
	}
	s.mu.Unlock()
}

// Pin registers h, the Hold that conn embeds, as the lock that req was
// granted on conn's session with fence, by a request sent at sent; it
// schedules its keepalive and, for a Watcher, the start of watching its
// connection (at once without a watch delay). The lease is enforced from
// sent. If Close was called, it releases the lock and returns an error
// matching driver.ErrClosed.
func (s *Holds[C]) Pin(h *Hold[C], conn C, req driver.AcquireRequest, fence uint64, sent time.Time) (driver.Grant, error) {
	_, watched := any(conn).(Watcher)
	h.Key, h.Token, h.Fence, h.Meta = req.Key, req.Token, fence, req.Meta
	h.conn, h.holds = conn, s
	h.use = make(chan struct{}, 1)
	h.deadline, h.ttl = sent.Add(req.TTL), req.TTL
	h.armed = watched && s.cfg.WatchDelay == 0
	h.deadlineNS.Store(h.deadline.UnixNano())
	h.use <- struct{}{}
	h.lost, h.lose = context.WithCancel(context.Background())
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), CleanupTimeout)
		defer cancel()
		_ = h.endLocked(ctx)
		return driver.Grant{}, driver.ErrClosed
	}
	s.held[holdID{req.Key, req.Token}] = h
	if watched && !h.armed {
		s.watchLaterLocked(h, s.cfg.WatchDelay)
	}
	s.scheduleLocked(h, sent.Add(h.interval()))
	s.mu.Unlock()
	h.Unlock()
	return driver.Grant{Fence: fence, Lost: h.lost, Sent: sent}, nil
}

// StartCleanup runs cleanup every interval until Close: a run that deleted
// a full batch runs the next one at once, at most 100 in a row. Each run may
// take up to the interval.
func (s *Holds[C]) StartCleanup(every time.Duration, batch int, cleanup func(context.Context) (int64, error)) {
	var ctx context.Context
	ctx, s.stopCleanup = context.WithCancel(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			for range 100 {
				cctx, cancel := context.WithTimeout(ctx, every)
				n, err := cleanup(cctx)
				cancel()
				if err != nil || n < int64(batch) {
					break
				}
			}
		}
	}()
}

// Close makes Enter fail from now on, calls stop, stops the cleanup,
// releases every held lock, waits for the work entered before, and returns
// what the releases and then after (which runs last) returned. A second
// Close does nothing and returns nil.
func (s *Holds[C]) Close(stop func(), after func() error) error {
	s.mu.Lock()
	if s.closed.Load() {
		s.mu.Unlock()
		return nil
	}
	s.closed.Store(true)
	held := make([]*Hold[C], 0, len(s.held))
	for _, h := range s.held {
		held = append(held, h)
	}
	s.wakeKeepaliveLocked()
	s.mu.Unlock()

	if stop != nil {
		stop()
	}
	if s.stopCleanup != nil {
		s.stopCleanup()
	}
	ctx, cancel := context.WithTimeout(context.Background(), CleanupTimeout)
	defer cancel()
	var errs []error
	for _, h := range held {
		if err := h.Release(ctx); err != nil && !errors.Is(err, driver.ErrNotHeld) {
			errs = append(errs, err)
		}
	}
	s.wg.Wait()
	if after != nil {
		errs = append(errs, after())
	}
	return errors.Join(errs...)
}
