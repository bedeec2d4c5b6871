package zklock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/driver"
)

// connLog records the last thing that went wrong with a connection Dial
// made: a failed dial (kept as the error value), or a problem go-zookeeper
// logs (a refused session, a broken connection). It stands in for
// go-zookeeper's logger, whose lines it otherwise drops, so that an
// unreachable store is named in the error instead of a bare timeout.
type connLog struct {
	mu      sync.Mutex
	last    error
	conn    net.Conn // the latest connection dialed
	aborted bool     // no more dials
}

// errAborted is what dials after abort return.
var errAborted = errors.New("connection abandoned")

// dial is go-zookeeper's dialer, remembering failures and the connection.
func (l *connLog) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.aborted:
		if c != nil {
			_ = c.Close()
		}
		return nil, errAborted
	case err != nil:
		l.last = err
	default:
		l.conn = c
	}
	return c, err
}

// abort closes conn, which has no session yet, and waits for its goroutine
// to end (its events channel closes). go-zookeeper's Close does not
// interrupt a session handshake in progress, which waits up to ten times the
// receive timeout for a server that accepted the connection but says
// nothing; closing the socket under it does.
func (l *connLog) abort(conn *zk.Conn, events <-chan zk.Event) {
	conn.Close()
	l.mu.Lock()
	l.aborted = true
	if l.conn != nil {
		_ = l.conn.Close()
	}
	l.mu.Unlock()
	for range events {
	}
}

// Printf is go-zookeeper's logger; it only logs problems (WithLogInfo(false)).
func (l *connLog) Printf(format string, args ...any) {
	if !strings.HasPrefix(format, "failed to connect") { // dial already kept the error value
		l.set(fmt.Errorf(format, args...))
	}
}

func (l *connLog) set(err error) {
	l.mu.Lock()
	l.last = err
	l.mu.Unlock()
}

// lastError returns the last problem seen, or nil; a nil log has none.
func (l *connLog) lastError() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// awaitSession reads events until the connection has a session or ctx ends.
// Events may be dropped by go-zookeeper when nobody reads, so the state is
// also read directly.
func awaitSession(ctx context.Context, conn *zk.Conn, events <-chan zk.Event) error {
	for conn.State() != zk.StateHasSession {
		select {
		case _, ok := <-events:
			if !ok {
				return zk.ErrConnectionClosed
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// op returns ctx joined with the backend's life: it is cancelled with cause
// driver.ErrClosed when the backend closes. It fails at once with
// ErrClosed if the backend is closed. stop must be called.
func (b *Backend) op(ctx context.Context) (context.Context, context.CancelFunc, error) {
	if b.life.Err() != nil {
		return nil, nil, driver.ErrClosed
	}
	ctx, cancel := context.WithCancelCause(ctx)
	unhook := context.AfterFunc(b.life, func() { cancel(driver.ErrClosed) })
	return ctx, func() {
		unhook()
		cancel(context.Canceled)
	}, nil
}

// errRequestTimeout is what a request that got no answer within the
// request timeout returns.
var errRequestTimeout = errors.New("no answer within the request timeout")

// call runs one ZooKeeper request, which go-zookeeper cannot cancel, and
// returns when it does, when ctx ends, or when the request timeout passes,
// whichever is first. A request left behind finishes on its own or when the
// connection closes; if late is not nil, it gets the result of such a
// request, in a goroutine Close waits for.
func call[T any](ctx context.Context, b *Backend, f func() (T, error), late func(context.Context, T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	timeout := time.NewTimer(b.requestTimeout)
	defer timeout.Stop()
	var zero T
	var err error
	select {
	case r := <-ch:
		return r.v, b.closedOr(r.err)
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-timeout.C:
		err = b.unanswered()
	}
	if late != nil {
		b.background(func(ctx context.Context) {
			if r := <-ch; r.err == nil {
				late(ctx, r.v)
			}
		})
	}
	return zero, err
}

// unanswered describes a request that timed out, naming the session's state
// and the last connection problem when there was one.
func (b *Backend) unanswered() error {
	err := fmt.Errorf("%w of %v (session %v)", errRequestTimeout, b.requestTimeout, b.conn.State())
	if last := b.log.lastError(); last != nil && b.conn.State() != zk.StateHasSession {
		return fmt.Errorf("%w; last connection error: %w", err, last)
	}
	return err
}

// closedOr maps the errors of a connection that was closed for good to
// driver.ErrClosed, keeping go-zookeeper's as the cause. A connection
// dropped for a while returns the same errors, and keeps them.
func (b *Backend) closedOr(err error) error {
	if !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrClosing) {
		return err
	}
	select {
	case <-b.connGone:
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	default:
	}
	if b.life.Err() != nil {
		return fmt.Errorf("%w: %w", driver.ErrClosed, err)
	}
	return err
}

// transient reports whether err may pass: a dropped connection, a server
// that does not answer, or a session that expired and was replaced.
func transient(err error) bool {
	switch {
	case errors.Is(err, driver.ErrClosed):
		return false
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrSessionExpired), errors.Is(err, zk.ErrSessionMoved),
		errors.Is(err, errRequestTimeout):
		return true
	}
	return false
}
