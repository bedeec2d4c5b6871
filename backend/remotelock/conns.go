package remotelock

import (
	"context"
	"errors"
	"net"
	"sync"
)

// connSet tracks the connections of a backend's own transport, so that
// Close can close them all: http.Transport.CloseIdleConnections skips an
// HTTP/2 connection that still has a stream being reset (a cancelled wait),
// whose read loop would outlive the backend.
type connSet struct {
	dialer *net.Dialer
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

func newConnSet(d *net.Dialer) *connSet {
	return &connSet{dialer: d, conns: make(map[*trackedConn]struct{})}
}

// dial is the transport's DialContext.
func (s *connSet) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := s.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		_ = c.Close()
		return nil, errors.New("remotelock: the backend is closed")
	}
	s.conns[tc] = struct{}{}
	return tc, nil
}

// closeAll closes every connection, and every one dialled later.
func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = make(map[*trackedConn]struct{})
	s.mu.Unlock()
	for c := range conns {
		_ = c.Conn.Close()
	}
}

// trackedConn leaves its set when closed.
type trackedConn struct {
	net.Conn
	set *connSet
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}
