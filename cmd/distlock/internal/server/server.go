// Package server is the distlock lock service: the LockService API of
// proto/distlock/v1 over gRPC, gRPC-Web and Connect (JSON or protobuf over
// HTTP) on one handler, in front of any distlock.Client.
//
// Every call is made as a tenant, named by its bearer token (see package
// auth); the tenant's keys live under "tenants/<tenant>/" in the store and
// no request can name another tenant's key, except an admin's ForceRelease
// and List. The server keeps no lock state of its own: tokens, sessions and
// idempotent retries are all derived from, or stored in, the store, so any
// number of servers can run in front of one store.
//
// The server never renews a lock on a client's behalf. Shutdown refuses new
// calls and ends waits, but releases nothing: a client's locks live on until
// their leases end or the client releases them through another server.
package server

import (
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// Config configures a Server.
type Config struct {
	// Client is the store. The caller builds it and closes it after the
	// server has stopped. Its policy and observers, if any, see store keys:
	// "tenants/<tenant>/<key>" for locks, "sessions/<tenant>/<handle>" for
	// sessions, so a policy group's prefix names the tenant too.
	Client *distlock.Client
	// Routes send the keys under a prefix to a store of their own; every
	// other key goes to Client. A key's store must not change while it is
	// held: a server with other routes would look for it in another store.
	Routes []Route
	// Keys maps bearer tokens to tenants and roles. It may be nil only with
	// InsecureNoAuth.
	Keys *auth.Keyring
	// InsecureNoAuth serves every call, with or without a token, as tenant
	// "default" with role admin. For tests and a single trusted user only.
	InsecureNoAuth bool
	// Limits bounds requests; the zero value takes every default.
	Limits Limits
	// Logger receives one JSON-friendly record per call (method, tenant,
	// key, code, duration; never a token) and the audit records of forced
	// releases. nil discards them.
	Logger *slog.Logger
	// Registerer, if not nil, gets the server's request metrics.
	Registerer prometheus.Registerer
	// Ready is the /readyz probe. nil inspects a probe key in the store.
	Ready func(ctx context.Context) error
	// MaxHold, if not nil, caps how long a lock may be held, by store key
	// (a policy's max_hold: see policy.Policy.MaxHold). Renew and
	// KeepAlive shorten a lease to what is left of the cap, so that the
	// store ends the lock there, as the watchdog lets a Lock go at its cap;
	// Renew then fails with NotFound. nil sets no cap.
	MaxHold func(storeKey string) time.Duration
	// Lease, if not nil, is the lease of an Acquire that names none, by
	// store key (a policy group's lease: see policy.Policy.Lease); zero
	// keeps Limits.DefaultLease.
	Lease func(storeKey string) time.Duration
}

// DefaultTenant is the tenant of every call under InsecureNoAuth.
const DefaultTenant = "default"

// compressMinBytes is the smallest answer the server compresses.
const compressMinBytes = 4 << 10

// readyProbeKey is the store key the default /readyz probe inspects: outside
// every tenant's namespace, never held.
const readyProbeKey = "probe/readyz"

// Server serves the LockService API. Create it with New.
type Server struct {
	store    *stores // the store of each key
	keys     atomic.Pointer[auth.Keyring]
	insecure bool
	limits   Limits
	log      *slog.Logger
	metrics  *metrics
	ready    func(ctx context.Context) error
	probe    *sharedProbe                        // ready, shared by its askers
	maxHold  func(storeKey string) time.Duration // never nil
	lease    func(storeKey string) time.Duration // nil: Limits.DefaultLease
	limiters *limiters
	events   *broadcaster
	requests pendingRequests // requests to release, for the holders' renewals
	polls    polls           // the Watch streams' shared polls of each tenant
	mon      monitor         // the dashboard's view of the locks (monitor.go)
	live     liveCalls
	waiters  tenantCaps // Acquire calls waiting, per tenant
	parking  parking    // the waits of Acquire calls that resume
	streams  tenantCaps // Watch streams, per tenant
	sessions sessionCache
	// holdCalls lets a retried AcquirePermit or AcquireRW wait for its
	// first call.
	holdCalls callGate

	stopping atomic.Bool
	stopCtx  context.Context    // cancelled by Shutdown: ends waits and watches
	stop     context.CancelFunc // of stopCtx
	handler  http.Handler
}

// New returns a server over cfg.Client. It fails on a nil client, a nil
// keyring without InsecureNoAuth, invalid limits, or metrics that cannot be
// registered (a registry that has a server's already, say).
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("server: Config.Client is nil")
	}
	if cfg.Keys == nil && !cfg.InsecureNoAuth {
		return nil, errors.New("server: Config.Keys is nil: give a keyring, or set InsecureNoAuth")
	}
	limits, err := cfg.Limits.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := newStores(cfg.Client, cfg.Routes)
	if err != nil {
		return nil, err
	}
	s := &Server{
		store:    st,
		insecure: cfg.InsecureNoAuth,
		limits:   limits,
		log:      cfg.Logger,
		ready:    cfg.Ready,
		maxHold:  cfg.MaxHold,
		lease:    cfg.Lease,
		limiters: newLimiters(limits.rateLimit(), limits.Burst),
		events:   newBroadcaster(),
		waiters:  tenantCaps{what: "waiting Acquire calls", max: limits.MaxWaitersPerTenant},
		streams:  tenantCaps{what: "Watch streams", max: limits.MaxStreamsPerTenant},
	}
	if s.log == nil {
		s.log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	if s.ready == nil {
		s.ready = s.probeStore
	}
	if s.maxHold == nil {
		s.maxHold = func(string) time.Duration { return 0 }
	}
	s.mon.maxHold = s.maxHold
	s.keys.Store(cfg.Keys)
	if s.metrics, err = newMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	s.parking.release = s.releaseParked
	s.probe = &sharedProbe{run: s.ready, stop: s.stopCtx, log: s.log}
	s.polls = polls{store: s.store, interval: limits.WatchInterval, stopCtx: s.stopCtx}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the server's HTTP handler: the LockService at its path
// (/distlock.v1.LockService/) in gRPC, gRPC-Web and Connect, plus /healthz
// (the process is up), /readyz (the store answers, and Shutdown has not
// begun), and, open to callers without a token, gRPC server reflection and
// the gRPC health service (grpc.health.v1.Health/Check, as /readyz). /metrics is not here: mount promhttp over the Registerer's registry.
//
// gRPC needs HTTP/2. Over TLS, net/http negotiates it; in cleartext the
// caller's http.Server must allow it, with
//
//	var p http.Protocols
//	p.SetHTTP1(true)
//	p.SetUnencryptedHTTP2(true)
//	srv := &http.Server{Handler: s.Handler(), Protocols: &p}
//
// Without that, gRPC clients fail over plain TCP while Connect and gRPC-Web
// over HTTP/1.1 still work.
func (s *Server) Handler() http.Handler { return s.handler }

// Shutdown makes every new call fail with Unavailable, ends the current
// waits of Acquire and every Watch stream with Unavailable, and fails
// /readyz. It releases no lock a caller got: locks stay held until their
// holders release them or their leases end; what it releases is a grant
// made to a place kept between a wait's calls (resumes) that no call took
// yet, whose caller's next call may go to another instance. Call it before the http.Server's own Shutdown,
// which then has only short calls to wait for. It is safe to call more than
// once.
func (s *Server) Shutdown() {
	s.stopping.Store(true)
	s.stop()
	s.parking.close()
}

// SetKeys replaces the keyring, atomically: calls that began before keep the
// identity they were given, later ones use k. A nil k refuses every token
// (unless the server runs with InsecureNoAuth).
// Calls in progress whose token k lacks, or whose role under k no longer
// allows them, end at once: a Watch stream or an Acquire's wait ends with
// Unauthenticated or PermissionDenied.
func (s *Server) SetKeys(k *auth.Keyring) {
	s.keys.Store(k)
	s.live.revoke(k)
}

// routes builds the handler tree.
func (s *Server) routes() http.Handler {
	opts := append(jsonCodecs(),
		connect.WithReadMaxBytes(s.limits.MaxRequestBytes),
		connect.WithCompression("gzip", newBoundedGzip(s.limits.MaxRequestBytes),
			func() connect.Compressor { return gzip.NewWriter(nil) }),
		// Answers are a few dozen bytes: gzip would cost more than it saves
		// (it was a tenth of the service's CPU). Large List pages still go
		// compressed to a client that accepts it.
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithInterceptors(outcome{}),
	)
	path, api := distlockv1connect.NewLockServiceHandler(&service{s: s}, opts...)
	mux := http.NewServeMux()
	mux.Handle(path, s.guard(api))
	for path, h := range s.openHandlers(connect.WithReadMaxBytes(s.limits.MaxRequestBytes)) {
		mux.Handle(path, h)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", s.serveReady)
	return mux
}

// serveReady answers /readyz: 200 while the store answers the probe and the
// server is not shutting down, else 503 with the reason. Anyone may ask, so
// a failed probe is answered without its error, which names the store
// (address, user, database): the log has it.
func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	if err := s.readiness(r.Context()); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ready\n")
}

// readiness returns nil while the store answers the probe and the server
// is not shutting down, else why not, in words fit for anyone: a failed
// probe's error, which names the store, goes to the log only.
func (s *Server) readiness(ctx context.Context) error {
	if s.stopping.Load() {
		return errors.New("shutting down")
	}
	if err := s.probe.check(ctx); err != nil {
		return errors.New("the store does not answer (the log says why)")
	}
	return nil
}

// probeEvery is how long a readiness probe's answer serves every asker.
const probeEvery = time.Second

// probeTimeout bounds one readiness probe.
const probeTimeout = 5 * time.Second

// sharedProbe runs the readiness probe once for every asker at the time,
// and lets its answer serve later askers for probeEvery: anyone who
// reaches the port may ask, and must not cost the store a read each.
type sharedProbe struct {
	run  func(context.Context) error
	stop context.Context // Shutdown ends a probe in flight
	log  *slog.Logger

	mu      sync.Mutex
	at      time.Time // when the last probe ended
	err     error
	running chan struct{} // closed when the probe in flight ends; nil if none
}

// check returns the answer of a probe that ended within probeEvery, or of
// the one it starts or joins, or ctx's error if ctx ends first.
func (p *sharedProbe) check(ctx context.Context) error {
	p.mu.Lock()
	if !p.at.IsZero() && time.Since(p.at) < probeEvery {
		defer p.mu.Unlock()
		return p.err
	}
	done := p.running
	if done == nil {
		done = make(chan struct{})
		p.running = done
		go p.probe(done)
	}
	p.mu.Unlock()
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// probe runs one probe, within probeTimeout and until Shutdown, whoever
// asked having gone or not, and closes done.
func (p *sharedProbe) probe(done chan struct{}) {
	ctx, cancel := context.WithTimeout(p.stop, probeTimeout)
	err := p.run(ctx)
	cancel()
	if err != nil {
		p.log.Warn("not ready: the store does not answer", "err", err)
	}
	p.mu.Lock()
	p.err, p.at, p.running = err, time.Now(), nil
	p.mu.Unlock()
	close(done)
}

// probeStore is the default readiness probe: one Inspect of a key no one
// holds, in every store.
func (s *Server) probeStore(ctx context.Context) error {
	for _, c := range s.store.all() {
		if _, err := c.Inspect(ctx, readyProbeKey); err != nil {
			return err
		}
	}
	return nil
}
