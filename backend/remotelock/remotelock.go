package remotelock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// Backend is a distlock backend over the distlock lock service. Create it
// with New or distlock.Open("distlock://..."). It is safe for concurrent use.
type Backend struct {
	rpc            distlockv1connect.LockServiceClient
	locks          lockCalls    // a lock's calls, the short ones batched
	base           string       // base URL, for errors and the health probe
	http           *http.Client // the client calls go through
	conns          *connSet     // of the backend's own client, which Close closes; nil for the caller's
	requestTimeout time.Duration
	maxWait        time.Duration

	// closed and calls: begin counts a call under the read lock, so that
	// Close, which sets closed under the write lock, waits for every call
	// that began before it.
	closeMu sync.RWMutex
	closed  bool
	calls   sync.WaitGroup
	closing context.Context // done once Close starts: ends the calls in progress
	stop    context.CancelFunc

	mu        sync.Mutex
	held      map[lockID]*holding // by key and core token
	nextSweep int                 // len(held) at which to drop long-expired entries

	watch     *lossWatch    // nil without WithLossWatch
	contended contendedKeys // keys a try found held lately
}

var (
	_ driver.Backend       = (*Backend)(nil)
	_ driver.Waiter        = (*Backend)(nil)
	_ driver.Lister        = (*Backend)(nil)
	_ driver.ForceReleaser = (*Backend)(nil)
	_ driver.Namer         = (*Backend)(nil)
	_ driver.TTLRenewer    = (*Backend)(nil)

	_ driver.ReleaseRequester = (*Backend)(nil)
)

// lockID names one acquisition: the key and the token the core gave it.
type lockID struct{ key, token string }

// holding is what the backend keeps of an acquisition.
type holding struct {
	// server is the service's token for the lock; empty while the outcome
	// of the acquisition is unknown (its reply never came), when req says
	// what to release.
	server string
	calls  calls // the service's calls for it: a lock's or a permit's
	req    driver.AcquireRequest
	fence  uint64
	// until is when the entry may be dropped: long after the lease the
	// service last confirmed ended.
	until time.Time
	lost  context.CancelFunc      // ends the grant's Lost context; nil while unknown
	ask   context.CancelCauseFunc // ends the grant's Requested context; nil while unknown
	// releasing is set while this backend releases the hold: the release
	// the Watch stream tells of then is its own.
	releasing bool
}

// sweepGrace is how long past its last confirmed lease an entry is kept:
// by then the store has freed the key (a store may round a lease up by a
// few seconds), so a Renew or Release could only say ErrNotHeld.
const sweepGrace = time.Minute

// New returns a backend that calls the lock service at baseURL (http:// or
// https://, with an optional path prefix) through httpClient, which the
// caller keeps: Close does not close its connections. A nil httpClient is
// replaced by one of the backend's own, which Close closes: for http:// it
// speaks HTTP/2 with prior knowledge (h2c), which the service accepts, so
// that all calls share one connection; for https:// it negotiates HTTP/2 by
// ALPN. New makes no request; a bad URL or an invalid option is an error
// matching driver.ErrInvalidOption.
func New(httpClient *http.Client, baseURL string, opts ...Option) (*Backend, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	u, err := parseBase(baseURL)
	if err != nil {
		return nil, err
	}
	var conns *connSet
	if httpClient == nil {
		var t *http.Transport
		t, conns = newTransport(u.Scheme == "http", nil, c.requestTimeout)
		httpClient = &http.Client{Transport: t}
	}
	return newBackend(httpClient, conns, u.String(), c), nil
}

// parseBase checks a base URL: http or https, a host, no user, query or
// fragment. The result has no trailing slash.
func parseBase(baseURL string) (_ *url.URL, err error) {
	u, err := url.Parse(baseURL)
	if err == nil {
		shown := *u // errors show no query or fragment, where a secret may hide
		shown.RawQuery, shown.Fragment, shown.RawFragment = "", "", ""
		defer func() {
			if err != nil {
				err = fmt.Errorf("remotelock: base URL %q: %w", driver.RedactURL(&shown), err)
			}
		}()
	}
	switch {
	case err != nil:
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a secret
		}
		return nil, fmt.Errorf("remotelock: base URL: %w: %v", driver.ErrInvalidOption, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%w: the scheme must be http or https", driver.ErrInvalidOption)
	case u.Host == "":
		return nil, fmt.Errorf("%w: no host", driver.ErrInvalidOption)
	case u.User != nil:
		return nil, fmt.Errorf("%w: a URL carries no credentials; use WithToken", driver.ErrInvalidOption)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return nil, fmt.Errorf("%w: no query or fragment allowed", driver.ErrInvalidOption)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// newTransport returns the transport of a backend's own HTTP client: h2c
// for plain HTTP when h2c is set, else HTTP/1.1 or, over TLS, HTTP/2 by
// ALPN. Idle HTTP/2 connections are pinged, so that a dead one is dropped
// within two request timeouts rather than when the kernel gives up.
func newTransport(h2c bool, tlsConfig *tls.Config, timeout time.Duration) (*http.Transport, *connSet) {
	conns := newConnSet(&net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second})
	t := &http.Transport{
		DialContext:         conns.dial,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: timeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256, // HTTP/1.1: one connection per concurrent call
		IdleConnTimeout:     90 * time.Second,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: timeout, PingTimeout: timeout},
	}
	var p http.Protocols
	if h2c {
		p.SetUnencryptedHTTP2(true) // prior knowledge: never through a proxy
	} else {
		t.Proxy = http.ProxyFromEnvironment
		p.SetHTTP1(true)
		p.SetHTTP2(true)
	}
	t.Protocols = &p
	return t, conns
}

func newBackend(hc *http.Client, conns *connSet, base string, c config) *Backend {
	copts := []connect.ClientOption{
		// Lock messages are a few dozen bytes: compressing them costs more
		// than it saves, so the backend does not offer gzip.
		connect.WithAcceptCompression("gzip", nil, nil),
	}
	if c.grpc {
		copts = append(copts, connect.WithGRPC())
	}
	if c.token != "" {
		copts = append(copts, connect.WithInterceptors(bearer("Bearer "+c.token)))
	}
	b := &Backend{
		rpc:            distlockv1connect.NewLockServiceClient(hc, base, copts...),
		base:           base,
		http:           hc,
		conns:          conns,
		requestTimeout: c.requestTimeout,
		maxWait:        c.maxWait,
		held:           make(map[lockID]*holding),
		nextSweep:      1024,
	}
	b.closing, b.stop = context.WithCancel(context.Background())
	b.locks = newLockCalls(b.rpc, c.requestTimeout)
	if c.watchLoss {
		b.watch = newLossWatch(b)
	}
	return b
}

// Name returns "distlock".
func (b *Backend) Name() string { return "distlock" }

// Close ends the calls in progress, waits for them (each returns an error
// matching driver.ErrClosed), stops the loss watch, and closes the
// connections of the HTTP client if the backend made it. The locks this backend
// holds stay in the store until released (by another backend, with their
// token) or expired. Every call after Close returns an error matching
// driver.ErrClosed. Closing twice is harmless.
func (b *Backend) Close() error {
	b.closeMu.Lock()
	if b.closed {
		b.closeMu.Unlock()
		return nil
	}
	b.closed = true
	b.closeMu.Unlock()
	b.stop()
	b.calls.Wait()
	b.locks.close()
	if b.watch != nil {
		b.watch.wait()
	}
	b.mu.Lock()
	b.held = make(map[lockID]*holding)
	b.mu.Unlock()
	if b.conns != nil {
		b.http.CloseIdleConnections()
		b.conns.closeAll()
	}
	return nil
}

// call is one call to the service in progress.
type call struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	stop   func() bool
	b      *Backend
}

// errClosing is the cause of a call's context that Close ended.
var errClosing = errors.New("remotelock: closing")

// begin starts a call, bounded by timeout (if positive) within
// ctx and ended by Close, or returns an error matching driver.ErrClosed after Close.
// The caller must call end.
func (b *Backend) begin(ctx context.Context, timeout time.Duration) (*call, error) {
	b.closeMu.RLock()
	if b.closed {
		b.closeMu.RUnlock()
		return nil, driver.ErrClosed
	}
	b.calls.Add(1)
	b.closeMu.RUnlock()
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(b.closing, func() { cancel(errClosing) })
	if timeout <= 0 {
		return &call{ctx: cctx, cancel: cancel, stop: stop, b: b}, nil
	}
	tctx, tcancel := context.WithTimeout(cctx, timeout)
	return &call{ctx: tctx, cancel: func(cause error) { tcancel(); cancel(cause) }, stop: stop, b: b}, nil
}

// end releases the call's resources.
func (c *call) end() {
	c.stop()
	c.cancel(nil)
	c.b.calls.Done()
}

// closedByClose reports whether Close ended the call.
func (c *call) closedByClose() bool { return errors.Is(context.Cause(c.ctx), errClosing) }

// isClosed reports whether Close has begun.
func (b *Backend) isClosed() bool {
	b.closeMu.RLock()
	defer b.closeMu.RUnlock()
	return b.closed
}

// bearer is a connect interceptor that sends a bearer token with every call.
type bearer string

// WrapUnary sets the header of a unary call.
func (h bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", string(h))
		return next(ctx, req)
	}
}

// WrapStreamingClient sets the header of a stream (Watch).
func (h bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", string(h))
		return conn
	}
}

// WrapStreamingHandler leaves a handler alone: the backend is a client.
func (h bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
