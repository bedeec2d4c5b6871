package cli

import (
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// What serve gives its callers, so that none can take what the process
// needs to live: a file descriptor per connection, up to a cap below the
// open-file limit (the rest is the store's: the embedded etcd's log,
// database and sockets, or a pool of connections to a remote store), a cap
// per remote address, and a deadline for each request's body.
const (
	// fdReserve is how many open files the default --max-connections
	// leaves to the store and the files of the process.
	fdReserve = 512
	// DefaultMaxStreamsPerConnection is --max-streams-per-connection's
	// default: requests open at once on one HTTP/2 connection.
	DefaultMaxStreamsPerConnection = 100
	// DefaultMaxConnectionsPerIP is --max-connections-per-ip's default.
	DefaultMaxConnectionsPerIP = 256
	// DefaultBodyTimeout is --body-timeout's default.
	DefaultBodyTimeout = 30 * time.Second
	// refusedLogEvery is how often, at most, refused connections are logged.
	refusedLogEvery = 10 * time.Second
)

// openFileLimit returns the process's limit of open files (the soft
// RLIMIT_NOFILE). On Linux, Go raises it to the hard limit when the
// process starts (os package, since Go 1.19), so this is the hard limit
// too, unless a program lowered it since.
func openFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	return l.Cur, nil
}

// defaultMaxConns is --max-connections' default for an open-file limit:
// the limit less fdReserve, or half of it if that is more (a small limit,
// under 1024), so that the store keeps at least half.
func defaultMaxConns(limit uint64) int {
	limit = min(limit, math.MaxInt32)
	return int(max(limit-min(limit, fdReserve), limit/2, 1))
}

// connCaps are the connection caps in force.
type connCaps struct {
	openFiles uint64 // the open-file limit they derive from
	max       int    // connections in all
	perIP     int    // connections of one remote address (one /64 in IPv6)
}

// connCaps returns the caps of the flags for the process's open-file
// limit, and a warning if --max-connections leaves the store fewer than
// fdReserve open files. --max-connections 0 is defaultMaxConns; the cap
// per address, unless given (and not 0), is DefaultMaxConnectionsPerIP or
// half of --max-connections if that is less, so that one address never
// holds every connection; given, it is at most --max-connections.
func (f *serveFlags) connCaps(limit uint64) (connCaps, string) {
	c := connCaps{openFiles: limit, max: f.maxConns, perIP: f.maxConnsPerIP}
	var warn string
	if c.max == 0 {
		c.max = defaultMaxConns(limit)
	} else if uint64(c.max)+fdReserve > limit {
		warn = "--max-connections leaves the store fewer than 512 of the process's open files: a flood of connections can starve it"
	}
	if !f.perIPSet || c.perIP == 0 {
		c.perIP = min(DefaultMaxConnectionsPerIP, max(c.max/2, 1))
	}
	c.perIP = min(c.perIP, c.max)
	return c, warn
}

// connLimiter is a net.Listener that holds at most caps.max connections,
// and caps.perIP of one remote address. A connection over a cap is
// accepted and closed at once, counted and logged (once per
// refusedLogEvery at most), and Accept goes on to the next one.
//
// golang.org/x/net/netutil.LimitListener is not used: at its limit it
// stops calling Accept, so the kernel's queue fills and every client
// waits, the health checks and the operator's too, until an attacker's
// connection ends; and it has no cap per address.
type connLimiter struct {
	net.Listener
	caps    connCaps
	log     *slog.Logger
	refused *prometheus.CounterVec // by limit: "total" or "per_ip"
	open    prometheus.Gauge

	mu       sync.Mutex
	total    int
	byAddr   map[netip.Addr]int
	lastLog  time.Time
	unlogged int // refused since the last log
}

// limitConns wraps ln in a connLimiter with caps. Its metrics go to reg if
// it is not nil.
func limitConns(ln net.Listener, caps connCaps, log *slog.Logger, reg prometheus.Registerer) (*connLimiter, error) {
	l := &connLimiter{
		Listener: ln, caps: caps, log: log, byAddr: make(map[netip.Addr]int),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "distlock", Subsystem: "server", Name: "connections_refused_total",
			Help: "Connections closed as soon as accepted: over --max-connections (limit=total) or --max-connections-per-ip (limit=per_ip).",
		}, []string{"limit"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "distlock", Subsystem: "server", Name: "connections",
			Help: "Connections open now, of at most --max-connections.",
		}),
	}
	l.refused.WithLabelValues("total")
	l.refused.WithLabelValues("per_ip")
	if reg != nil {
		for _, c := range []prometheus.Collector{l.refused, l.open} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// Accept returns the next connection within the caps; it refuses (closes)
// those over them meanwhile.
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := addrKey(c.RemoteAddr())
		if limit := l.admit(addr); limit != "" {
			l.refuse(limit, addr)
			_ = c.Close()
			continue
		}
		l.open.Inc()
		return &limitedConn{Conn: c, release: func() { l.release(addr) }}, nil
	}
}

// admit counts a connection from addr in, or returns the limit it is
// over: "total" or "per_ip".
func (l *connLimiter) admit(addr netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.caps.max:
		return "total"
	case l.byAddr[addr] >= l.caps.perIP:
		return "per_ip"
	}
	l.total++
	l.byAddr[addr]++
	return ""
}

// release counts a connection from addr out.
func (l *connLimiter) release(addr netip.Addr) {
	l.open.Dec()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

// refuse counts a refused connection, and logs it with those refused since
// the last log if that was refusedLogEvery ago.
func (l *connLimiter) refuse(limit string, addr netip.Addr) {
	l.refused.WithLabelValues(limit).Inc()
	l.mu.Lock()
	l.unlogged++
	now := time.Now()
	if now.Sub(l.lastLog) < refusedLogEvery {
		l.mu.Unlock()
		return
	}
	n := l.unlogged
	l.unlogged, l.lastLog = 0, now
	l.mu.Unlock()
	l.log.Warn("connections refused: over the connection limit", "limit", limit, "remote", addr.String(),
		"refused", n, // since the last such line
		"max_connections", l.caps.max, "max_connections_per_ip", l.caps.perIP)
}

// addrKey returns what the cap per address counts by: the remote IP, or
// its /64 for IPv6 (what one host or one customer is usually given). An
// address of another kind (not TCP) is the zero Addr: one for all.
func addrKey(a net.Addr) netip.Addr {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Addr{}
	}
	ip := tcp.AddrPort().Addr().Unmap()
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return ip
}

// limitedConn is a connection of a connLimiter, counted out once it is
// closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// Close closes the connection and counts it out (once).
func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite shuts down the writing side, as net/http does before it closes
// a connection that it answered with an error, so that the client reads
// the answer before the reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// bodyDeadline gives each request with a body timeout to send it: a read
// deadline from the start of the request, cleared once the body was read
// to its end or closed without error. With HTTP/1 it is the connection's
// read deadline, with HTTP/2 the stream's; a request without a body gets
// none.
//
// http.Server.ReadTimeout would bound bodies too, but as one setting of the
// server that no handler sees or can move, which its documentation advises
// against; a deadline set through http.ResponseController belongs to the
// request, and a handler that must take longer (an upload, say) can move
// it. Neither one ends the context of a handler that runs long after its
// body was read (an Acquire that waits, a Watch that streams): net/http
// clears the connection's deadline when it starts watching for the
// client's going away.
func bodyDeadline(h http.Handler, timeout time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A request without a body has nothing to wait for, and on HTTP/1
		// its background read is already running: a deadline there would
		// cancel the request at the timeout.
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			// Not a net/http connection (no deadline to set): serve as is.
			h.ServeHTTP(w, r)
			return
		}
		b := &deadlineBody{ReadCloser: r.Body, rc: rc}
		r.Body = b
		defer b.finish()
		h.ServeHTTP(w, r)
	})
}

// deadlineBody is a request body under a read deadline, which it clears
// at the body's end: once Read returned io.EOF, or Close returned nil.
//
// Any other error keeps the deadline: after a handler gave up on a body
// (at the deadline, or over a size limit), net/http reads what is left of
// it to reuse the connection, and that read must not wait for a client
// that sends a byte a second.
type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController

	mu   sync.Mutex
	done bool // the deadline was cleared, or the handler returned
}

// Read reads the body; at its end the deadline goes.
func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.clear()
	}
	return n, err
}

// Close closes the body, and then clears the deadline if that went well:
// with HTTP/1, Close reads what is left of the body (to reuse the
// connection), under the deadline.
func (b *deadlineBody) Close() error {
	err := b.ReadCloser.Close()
	if err == nil {
		b.clear()
	}
	return err
}

// clear clears the read deadline, once, while the handler runs.
func (b *deadlineBody) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

// finish marks the handler's end: a ResponseController must not be used
// after it (with HTTP/2 it panics), and net/http sets the deadlines of
// what follows itself.
func (b *deadlineBody) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
}
