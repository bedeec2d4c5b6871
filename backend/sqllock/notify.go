package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
)

// releaseChannel is the PostgreSQL channel the release statement notifies,
// with the key as payload.
const releaseChannel = "distlock_release"

// listener delivers PostgreSQL release notices to the backend's waiters,
// and forced releases' notices to its holders, over one dedicated
// connection, started by the first waiter or followed hold and shared by
// all. If the connection fails, every waiter is woken to re-check, and,
// while waiters or followed holds remain, a new one is started in the
// background; failing that, the next Watch or grant starts one. A forced
// release while no connection listens is learnt at the next renewal.
type listener struct {
	db       *sql.DB
	lost     func(payload string) // takes a notice of lostChannel
	holding  func() bool          // reports whether a hold is followed
	startMu  sync.Mutex           // one start at a time
	restarts sync.WaitGroup       // background starts after a failed connection

	mu       sync.Mutex
	running  bool
	closed   bool
	stop     context.CancelFunc
	done     chan struct{}
	watchers map[string]map[chan struct{}]struct{}
}

// watch registers a waiter for key once the backend is listening.
func (l *listener) watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := l.start(ctx); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.watchers == nil {
		l.watchers = make(map[string]map[chan struct{}]struct{})
	}
	if l.watchers[key] == nil {
		l.watchers[key] = make(map[chan struct{}]struct{})
	}
	l.watchers[key][ch] = struct{}{}
	l.mu.Unlock()
	stop := func() {
		l.mu.Lock()
		delete(l.watchers[key], ch)
		if len(l.watchers[key]) == 0 {
			delete(l.watchers, key)
		}
		l.mu.Unlock()
	}
	return ch, stop, nil
}

// start opens the listening connection unless it runs, and returns once
// LISTEN is in effect, so that no release after it goes unnoticed.
func (l *listener) start(ctx context.Context) error {
	l.startMu.Lock()
	defer l.startMu.Unlock()
	l.mu.Lock()
	running, closed := l.running, l.closed
	l.mu.Unlock()
	switch {
	case closed:
		return errors.New("sqllock: listen: backend closed")
	case running:
		return nil
	}
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqllock: listen: %w", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	listening, done := make(chan error, 1), make(chan struct{})
	go l.run(runCtx, conn, listening, done)
	select {
	case err = <-listening:
	case <-ctx.Done():
		err = ctx.Err()
	}
	l.mu.Lock()
	if err == nil && l.closed {
		err = errors.New("backend closed")
	}
	if err == nil {
		l.running, l.done = true, done
	}
	l.stop = stop // used by close only while running
	l.mu.Unlock()
	if err != nil {
		stop()
		<-done
		return fmt.Errorf("sqllock: listen: %w", err)
	}
	return nil
}

// run listens on conn until ctx ends or the connection fails. The
// connection is discarded afterwards, never returned to the pool with a
// LISTEN in effect.
func (l *listener) run(ctx context.Context, conn *sql.Conn, listening chan<- error, done chan<- struct{}) {
	defer close(done)
	var err error
	_ = conn.Raw(func(dc any) error {
		err = l.listen(ctx, dc, listening)
		return driver.ErrBadConn // discard the session
	})
	select {
	case listening <- err: // it failed before listening
	default:
	}
	_ = conn.Close()
	l.mu.Lock()
	l.running = false
	for _, ws := range l.watchers {
		for ch := range ws { // notices may have been missed: re-check
			notify(ch)
		}
	}
	restart := ctx.Err() == nil && !l.closed && (len(l.watchers) > 0 || l.holding())
	if restart {
		l.restarts.Add(1)
	}
	l.mu.Unlock()
	if restart { // waiters still wait, or holds are followed: listen again
		go func() {
			defer l.restarts.Done()
			rctx, cancel := context.WithTimeout(context.Background(), restartTimeout)
			defer cancel()
			_ = l.start(rctx) // failing, the next Watch tries again
		}()
	}
}

// restartTimeout bounds a background start after a failed connection.
const restartTimeout = 5 * time.Second

// listen runs LISTEN on the driver connection dc, reports it on listening,
// and delivers notices until ctx ends or the connection fails.
func (l *listener) listen(ctx context.Context, dc any, listening chan<- error) error {
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		return fmt.Errorf("release notices need the pgx driver, not %T: %w", dc, errors.ErrUnsupported)
	}
	pc := sc.Conn()
	if _, err := pc.Exec(ctx, "LISTEN "+releaseChannel+"; LISTEN "+lostChannel); err != nil {
		return err
	}
	listening <- nil
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n.Channel == lostChannel {
			l.lost(n.Payload)
		} else {
			l.wake(n.Payload)
		}
	}
}

// wake wakes the waiters of key.
func (l *listener) wake(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.watchers[key] {
		notify(ch)
	}
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// isRunning reports whether a connection listens.
func (l *listener) isRunning() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.running
}

// close stops listening for good and waits for the connection to be given
// up, and for a background start to see that it is closed.
func (l *listener) close() {
	l.startMu.Lock() // no start in flight
	l.mu.Lock()
	l.closed = true
	stop, done, running := l.stop, l.done, l.running
	l.mu.Unlock()
	if running {
		stop()
		<-done
	}
	l.startMu.Unlock()
	l.restarts.Wait()
}
