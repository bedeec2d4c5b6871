package cli

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/dashboard"
	"github.com/distlock/distlock/cmd/distlock/internal/embedetcd"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/observe"
	"github.com/distlock/distlock/telemetry"
)

// DefaultListen is where distlock serve listens without --listen.
const DefaultListen = "127.0.0.1:7070"

// reloadEvery is how often serve looks at its token, policy and
// certificate files for a change.
const reloadEvery = time.Second

// serveFlags are the flags of distlock serve.
type serveFlags struct {
	listen          string
	dataDir         string
	routes          []string
	tokens          string
	insecureNoAuth  bool
	tlsCert         string
	tlsKey          string
	tlsClientCA     string
	config          string
	defaultLease    time.Duration
	maxLease        time.Duration
	maxWait         time.Duration
	shutdownTimeout time.Duration
	logLevel        string
	maxConns        int
	maxConnsPerIP   int
	perIPSet        bool // --max-connections-per-ip was given
	maxConnStreams  int
	ratePerTenant   float64
	burstPerTenant  int
	bodyTimeout     time.Duration
	maxWaiters      int
	maxStreams      int
	streamLifetime  time.Duration
}

func newServeCommand(g *globals) *cobra.Command {
	f := &serveFlags{}
	c := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the lock service (gRPC, gRPC-Web and Connect/JSON on one port)",
		Long: `serve runs the distlock lock service: the LockService API of
proto/distlock/v1 over gRPC, gRPC-Web and Connect (JSON or protobuf over
HTTP) on one port, with /healthz, /readyz and /metrics beside it.

The store is an embedded single-node etcd in --data-dir (default
$XDG_STATE_HOME/distlock, else ~/.local/state/distlock), durable across
restarts, or any store URL given with --backend (or $DISTLOCK_BACKEND):
several serve processes over one etcd cluster, Redis Cluster or other shared
store act as one service. --route PREFIX=URL keeps the keys under a prefix in
a store of their own (--route tenants/acme/=etcd://10.0.1.1:2379): past what
one etcd cluster writes, each tenant or key prefix can have its own. A key's
store must not change while it is held: give every instance the same routes,
and change them only with the keys free.

Every call needs a bearer token from --tokens (lines of "<token> <tenant>
<role>", role viewer, client, tenant-admin or admin). --insecure-no-auth serves every
call as tenant "default" with role admin, only on a loopback address and
only to requests addressed to a loopback name (Host localhost, 127.0.0.1
or [::1]), so that no web page can reach it through DNS rebinding.
--tls-cert and --tls-key serve TLS; --tls-client-ca also requires a client
certificate signed by that CA.

The token file, the policy file (--config) and the TLS certificate are read
again when they change (checked every second) and on SIGHUP; a file that
does not load is refused, with the line at fault in the log, and the one
before stays in force. SIGTERM or SIGINT stops the service: new calls and
waiting Acquires get UNAVAILABLE, calls in progress get --shutdown-timeout to
finish, and no lock is released: holders renew them through another
instance, or after a restart.

No caller can take what the process needs to live. It holds at most
--max-connections connections (by default its open-file limit less 512,
or half of it if that is more: the store keeps the rest), and at most
--max-connections-per-ip of one address (an IPv6 /64; by default 256, or
half of --max-connections if that is less), before any token is checked,
and at most --max-streams-per-connection requests at once on one HTTP/2
connection (100).
A connection over either cap is closed as soon as it is accepted, counted
in distlock_server_connections_refused_total and logged (every 10s at
most). A request has --body-timeout to send its body. The serving log line
shows the open-file limit and the caps. Each tenant may keep at most
--max-waiters-per-tenant Acquire calls waiting and --max-streams-per-tenant
Watch streams open (one more gets RESOURCE_EXHAUSTED), and a Watch stream
ends after --max-stream-lifetime (UNAVAILABLE: clients open it again). A
token removed from --tokens, or whose role no longer allows a call, ends its
calls in progress at the reload. No tenant's calls are limited in rate
unless --rate-per-tenant says so.

Exit codes: 0 stopped by a signal; 1 the address cannot be listened on or
serving failed; 2 bad flags or files; 69 the store could not be reached or
the embedded store failed.`,
		Example: `  distlock serve --insecure-no-auth
  distlock serve --listen 0.0.0.0:7070 --tokens /etc/distlock/tokens --tls-cert cert.pem --tls-key key.pem
  distlock serve --backend etcd://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3:2379 --tokens tokens --config policy.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.prepare(cmd, g)
			if err != nil {
				return err
			}
			return cfg.run(cmd.Context())
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.listen, "listen", DefaultListen, "address to listen on, HOST:PORT (port 0 picks a free one)")
	fl.StringVar(&f.dataDir, "data-dir", "", "directory of the embedded etcd store (default $XDG_STATE_HOME/distlock or ~/.local/state/distlock); not with --backend")
	fl.StringArrayVar(&f.routes, "route", nil, "PREFIX=URL: keep the keys under PREFIX (tenants/<tenant>/..., sessions/<tenant>/...) in the store at URL; repeat for more (the longest matching prefix wins)")
	fl.StringVar(&f.tokens, "tokens", "", "token file: one \"<token> <tenant> <role>\" a line (required unless --insecure-no-auth)")
	fl.BoolVar(&f.insecureNoAuth, "insecure-no-auth", false, "serve every call as tenant \"default\", role admin, without tokens (loopback addresses and Host names only)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate (chain) to serve TLS with; needs --tls-key")
	fl.StringVar(&f.tlsKey, "tls-key", "", "PEM private key of --tls-cert")
	fl.StringVar(&f.tlsClientCA, "tls-client-ca", "", "PEM CA certificates: require a client certificate signed by one (mTLS); needs --tls-cert")
	fl.StringVar(&f.config, "config", "", "policy file (YAML lock groups: default and max lease, max wait, degradation)")
	fl.DurationVar(&f.defaultLease, "default-lease", distlock.DefaultLease, "lease of an Acquire, and TTL of a session, that names none")
	fl.DurationVar(&f.maxLease, "max-lease", server.DefaultMaxLease, "longest lease or session TTL a request may ask")
	fl.DurationVar(&f.maxWait, "max-wait", server.DefaultMaxWait, "longest wait an Acquire may ask")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "on SIGTERM or SIGINT, how long calls in progress may take to finish")
	fl.StringVar(&f.logLevel, "log-level", "info", "least level of the JSON log on stderr: debug, info, warn or error")
	fl.IntVar(&f.maxConns, "max-connections", 0, "most connections open at once; over it a new one is closed at once (0: the open-file limit less 512, or half of it if that is more)")
	fl.IntVar(&f.maxConnsPerIP, "max-connections-per-ip", DefaultMaxConnectionsPerIP, "most connections open at once from one remote IP (IPv6: one /64), before auth; not given, at most half of --max-connections; behind a proxy, raise it to --max-connections")
	fl.IntVar(&f.maxConnStreams, "max-streams-per-connection", DefaultMaxStreamsPerConnection, "most requests open at once on one HTTP/2 connection (gRPC calls and streams); the client is told, and one more is refused")
	fl.DurationVar(&f.bodyTimeout, "body-timeout", DefaultBodyTimeout, "how long a request may take to send its body, from its start; then the request fails and, with HTTP/1, its connection is closed")
	fl.Float64Var(&f.ratePerTenant, "rate-per-tenant", 0, "calls a second each tenant may make, on average; over it a call gets RESOURCE_EXHAUSTED (HTTP 429) naming the limit (0: no limit)")
	fl.IntVar(&f.burstPerTenant, "burst-per-tenant", 0, "calls a tenant over --rate-per-tenant may make at once (0: twice the rate)")
	fl.IntVar(&f.maxWaiters, "max-waiters-per-tenant", server.DefaultMaxWaiters, "most Acquire calls of one tenant waiting at once; one more gets RESOURCE_EXHAUSTED")
	fl.IntVar(&f.maxStreams, "max-streams-per-tenant", server.DefaultMaxStreams, "most Watch streams of one tenant open at once; one more gets RESOURCE_EXHAUSTED")
	fl.DurationVar(&f.streamLifetime, "max-stream-lifetime", server.DefaultMaxStreamLife, "how long a Watch stream may stay open; it then ends with UNAVAILABLE and the client opens it again")
	return c
}

// serveConfig is what serve runs with, once the flags and files checked out.
type serveConfig struct {
	flags   *serveFlags
	out     io.Writer // the start banner
	asJSON  bool
	log     *slog.Logger // the service's JSON log on stderr
	lockLog *slog.Logger // the client's lock events: the same stream, warn and up unless debug
	store   storeSpec
	keys    *auth.Keyring // nil with --insecure-no-auth
	policy  *livePolicy   // nil without --config
	certs   *certificate  // nil without TLS
	tls     *tls.Config   // nil without TLS
	limits  server.Limits
	reloads []*watchedFile
	srv     *server.Server // once it runs: a reloaded token file goes to it
	exit    func(code int) // ends the process on a fatal store error; nil: os.Exit
}

// prepare checks the flags and loads the files they name. Nothing here
// touches a store or the network: every error is a usage error.
func (f *serveFlags) prepare(cmd *cobra.Command, g *globals) (*serveConfig, error) {
	asJSON, err := g.json()
	if err != nil {
		return nil, err
	}
	level, err := parseLevel(f.logLevel)
	if err != nil {
		return nil, err
	}
	h := slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level})
	// The server logs every call with its outcome already; of the client's
	// lock events only losses and failures (warn, error) add to that,
	// unless debug asks for everything.
	lockMin := slog.LevelWarn
	if level <= slog.LevelDebug {
		lockMin = level
	}
	cfg := &serveConfig{
		flags: f, out: cmd.OutOrStdout(), asJSON: asJSON,
		log: slog.New(h), lockLog: slog.New(atLeast{min: lockMin, Handler: h}),
	}
	if err := f.checkListen(); err != nil {
		return nil, err
	}
	if err := f.checkLimits(); err != nil {
		return nil, err
	}
	f.perIPSet = cmd.Flags().Changed("max-connections-per-ip")
	cfg.limits = server.Limits{DefaultLease: f.defaultLease, MaxLease: f.maxLease, MaxWait: f.maxWait,
		MaxWaitersPerTenant: f.maxWaiters, MaxStreamsPerTenant: f.maxStreams, MaxStreamLifetime: f.streamLifetime,
		RatePerTenant: f.ratePerTenant, Burst: f.burstPerTenant}
	if cfg.store, err = f.storeSpec(cmd, g); err != nil {
		return nil, err
	}
	switch {
	case f.tokens != "" && f.insecureNoAuth:
		return nil, usage("serve: --tokens and --insecure-no-auth: choose one")
	case f.tokens == "" && !f.insecureNoAuth:
		return nil, usage("serve: no --tokens file: every call needs a bearer token (or, on a loopback address only, --insecure-no-auth)")
	case f.tokens != "":
		w := &watchedFile{path: f.tokens, what: "token file"}
		w.load = func([]byte) error {
			k, err := auth.Load(f.tokens)
			if err != nil {
				return err
			}
			if k.Len() == 0 {
				// Most likely a file caught while being rewritten in place:
				// it would lock every client out.
				return fmt.Errorf("%s has no token", f.tokens)
			}
			cfg.keys = k
			if cfg.srv != nil {
				cfg.srv.SetKeys(k)
			}
			return nil
		}
		if err := w.first(); err != nil {
			return nil, exit(ExitUsage, &opError{op: "serve: --tokens", err: err})
		}
		cfg.reloads = append(cfg.reloads, w)
	}
	if f.config != "" {
		cfg.policy = &livePolicy{}
		w := &watchedFile{path: f.config, what: "policy file", load: func(data []byte) error {
			if err := cfg.policy.load(data); err != nil {
				return fmt.Errorf("%s: %w", f.config, err)
			}
			return nil
		}}
		if err := w.first(); err != nil {
			return nil, exit(ExitUsage, &opError{op: "serve: --config", err: err})
		}
		cfg.reloads = append(cfg.reloads, w)
	}
	if err := cfg.prepareTLS(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// atLeast is a slog.Handler that passes on the records of level min and
// up to its Handler (which may want fewer).
type atLeast struct {
	min slog.Level
	slog.Handler
}

// Enabled reports whether both min and the Handler let level through.
func (h atLeast) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= h.min && h.Handler.Enabled(ctx, level)
}

// WithAttrs returns the handler with attrs, at the same min.
func (h atLeast) WithAttrs(attrs []slog.Attr) slog.Handler {
	return atLeast{min: h.min, Handler: h.Handler.WithAttrs(attrs)}
}

// WithGroup returns the handler with the group, at the same min.
func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{min: h.min, Handler: h.Handler.WithGroup(name)}
}

// parseLevel returns the slog level named s.
func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usage("serve: --log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// checkListen checks --listen, and that --insecure-no-auth listens only on
// a loopback address.
func (f *serveFlags) checkListen() error {
	host, port, err := net.SplitHostPort(f.listen)
	if err != nil {
		return usage("serve: --listen %q: want HOST:PORT, such as %s: %v", f.listen, DefaultListen, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return usage("serve: --listen %q: bad port: %v", f.listen, err)
	}
	if f.insecureNoAuth && !isLoopback(host) {
		return usage("serve: --insecure-no-auth serves every call as an admin without a token, so it listens only on a loopback address (127.0.0.1, ::1, localhost), not on %q; give --tokens to listen there", f.listen)
	}
	return nil
}

// isLoopback reports whether host names only loopback addresses: an IP in
// 127.0.0.0/8 or ::1, or "localhost". An empty host (every interface) and
// any other name are not.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// checkLimits checks the lease and wait flags against each other, and the
// connection, body and per-tenant limits.
func (f *serveFlags) checkLimits() error {
	switch {
	case f.maxLease < distlock.MinLease:
		return usage("serve: --max-lease %v: want at least %v", f.maxLease, distlock.MinLease)
	case f.defaultLease < distlock.MinLease || f.defaultLease > f.maxLease:
		return usage("serve: --default-lease %v: want %v to --max-lease %v", f.defaultLease, distlock.MinLease, f.maxLease)
	case f.maxWait < 0:
		return usage("serve: --max-wait %v cannot be negative", f.maxWait)
	case f.shutdownTimeout < 0:
		return usage("serve: --shutdown-timeout %v cannot be negative", f.shutdownTimeout)
	case f.maxConns < 0:
		return usage("serve: --max-connections %d cannot be negative (0 is the default)", f.maxConns)
	case f.maxConnsPerIP < 0:
		return usage("serve: --max-connections-per-ip %d cannot be negative (0 is the default)", f.maxConnsPerIP)
	case f.maxConnStreams < 1:
		return usage("serve: --max-streams-per-connection %d: want at least 1", f.maxConnStreams)
	case f.bodyTimeout <= 0:
		return usage("serve: --body-timeout %v: want more than 0", f.bodyTimeout)
	case f.ratePerTenant < 0 || math.IsNaN(f.ratePerTenant) || math.IsInf(f.ratePerTenant, 0):
		return usage("serve: --rate-per-tenant %v: want a number of calls a second, or 0 for no limit", f.ratePerTenant)
	case f.burstPerTenant < 0:
		return usage("serve: --burst-per-tenant %d cannot be negative (0 is twice the rate)", f.burstPerTenant)
	case f.burstPerTenant > 0 && f.ratePerTenant == 0:
		return usage("serve: --burst-per-tenant %d needs --rate-per-tenant", f.burstPerTenant)
	case f.maxWaiters < 1:
		return usage("serve: --max-waiters-per-tenant %d: want at least 1", f.maxWaiters)
	case f.maxStreams < 1:
		return usage("serve: --max-streams-per-tenant %d: want at least 1", f.maxStreams)
	case f.streamLifetime <= 0:
		return usage("serve: --max-stream-lifetime %v: want more than 0", f.streamLifetime)
	}
	return nil
}

// run serves until ctx ends (SIGTERM, SIGINT) or serving fails.
func (cfg *serveConfig) run(ctx context.Context) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	openFiles, err := openFileLimit()
	if err != nil {
		return exit(ExitError, &opError{op: "serve: the open-file limit", err: err})
	}
	caps, warn := cfg.flags.connCaps(openFiles)
	if warn != "" {
		cfg.log.Warn(warn, "open_files", openFiles, "max_connections", caps.max)
	}
	raw, err := net.Listen("tcp", cfg.flags.listen)
	if err != nil {
		return exit(ExitError, &opError{op: "serve", err: err})
	}
	defer raw.Close()

	reg := prometheus.NewRegistry()
	ln, err := limitConns(raw, caps, cfg.log, reg)
	if err != nil {
		return exit(ExitError, &opError{op: "serve", err: err})
	}
	obs, err := cfg.observers(reg)
	if err != nil {
		return exit(ExitError, &opError{op: "serve", err: err})
	}
	st, err := cfg.store.open(ctx, cfg.log, cfg.clientOptions(obs)...)
	if err != nil {
		return err
	}
	defer st.close(cfg.log)
	if st.etcd != nil {
		st.etcd.OnFatal(cfg.storeFatal)
	}

	sc := server.Config{
		Client: st.client, Routes: st.routes, Keys: cfg.keys, InsecureNoAuth: cfg.flags.insecureNoAuth,
		Limits: cfg.limits, Logger: cfg.log, Registerer: reg,
	}
	if cfg.policy != nil {
		sc.MaxHold, sc.Lease = cfg.policy.MaxHold, cfg.policy.Lease
	}
	srv, err := server.New(sc)
	if err != nil {
		return exit(ExitUsage, &opError{op: "serve", err: err})
	}
	cfg.srv = srv

	mux := http.NewServeMux()
	mux.Handle("/", srv.Handler())
	dash, err := dashboard.New(dashboard.Config{Server: srv, Logger: cfg.log, Addr: ln.Addr().String()})
	if err != nil {
		return exit(ExitError, &opError{op: "serve: dashboard", err: err})
	}
	dash.Register(mux) // the web page: GET / and /dashboard/
	// The store's own metrics (the embedded etcd's, Go's and the process's)
	// are on the default registry; the service's are on reg.
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{reg, prometheus.DefaultGatherer},
		promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(cfg.log.Handler(), slog.LevelWarn)}))
	var h http.Handler = mux
	if cfg.flags.insecureNoAuth {
		h = server.LoopbackHostsOnly(mux) // no DNS rebinding into an API without auth
	}
	hs := cfg.httpServer(h)
	var serveErr error
	served := make(chan struct{}) // closed when Serve returned, with serveErr
	go func() {
		defer close(served)
		if cfg.tls != nil {
			serveErr = hs.ServeTLS(ln, "", "")
		} else {
			serveErr = hs.Serve(ln)
		}
	}()
	if err := cfg.banner(ln.Addr().String(), st.describe); err != nil {
		cfg.log.Warn("write the start banner", "err", err)
	}
	cfg.log.Info("serving", "addr", ln.Addr().String(), "store", st.describe, "tls", cfg.tlsMode(), "auth", cfg.authMode(),
		"open_files", caps.openFiles, "max_connections", caps.max, "max_connections_per_ip", caps.perIP,
		"max_streams_per_connection", cfg.flags.maxConnStreams, "rate_per_tenant", cfg.flags.ratePerTenant,
		"body_timeout", cfg.flags.bodyTimeout.String())

	err = cfg.loop(ctx, hup, served, func() error { return serveErr }, st)
	cfg.stop(srv, hs, served)
	return err
}

// observers returns the client's observers: Prometheus metrics on reg and
// lock events in the log.
func (cfg *serveConfig) observers(reg prometheus.Registerer) (*observers, error) {
	m, err := telemetry.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	o := &observers{metrics: m, logger: telemetry.NewLogger(cfg.lockLog)}
	if cfg.policy != nil {
		cfg.policy.hooks = []func(string, bool, time.Duration){m.Degradation, o.logger.Degradation}
	}
	return o, nil
}

// observers are the telemetry observers of the client.
type observers struct {
	metrics *telemetry.Metrics
	logger  *telemetry.Logger
}

// clientOptions returns the options of the store's client: the observers,
// and the live policy if --config was given.
func (cfg *serveConfig) clientOptions(o *observers) []distlock.ClientOption {
	obs := []observe.Observer{o.metrics, o.logger}
	var opts []distlock.ClientOption
	if cfg.policy != nil {
		obs = append(obs, cfg.policy)
		opts = append(opts, distlock.WithPolicy(cfg.policy))
	}
	return append(opts, distlock.WithObserver(observe.Join(obs...)))
}

// httpServer returns the HTTP server: HTTP/1.1 and HTTP/2 (in cleartext
// too, for gRPC without TLS), no write timeout (Acquire waits and Watch
// streams last), bounded headers, request bodies (--body-timeout, see
// bodyDeadline), idle connections and requests open at once on one HTTP/2
// connection (--max-streams-per-connection).
func (cfg *serveConfig) httpServer(h http.Handler) *http.Server {
	if cfg.flags.bodyTimeout > 0 {
		h = bodyDeadline(h, cfg.flags.bodyTimeout)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	if cfg.tls == nil {
		p.SetUnencryptedHTTP2(true)
	}
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: cfg.flags.maxConnStreams},
		TLSConfig:         cfg.tls,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.log.Handler(), slog.LevelWarn),
	}
}

// loop waits for the end: a stop signal (nil), a failed server or a failed
// embedded store (an error); meanwhile it reloads the files on SIGHUP and
// when they change.
func (cfg *serveConfig) loop(ctx context.Context, hup <-chan os.Signal, served <-chan struct{}, serveErr func() error, st *serveStore) error {
	tick := time.NewTicker(reloadEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			cfg.log.Info("stopping", "reason", "signal")
			return nil
		case <-served:
			return exit(ExitError, &opError{op: "serve", err: serveErr()})
		case err := <-st.failed():
			cfg.log.Error("stopping", "reason", "the embedded etcd failed", "err", err)
			return exit(ExitUnavailable, &opError{op: "serve: embedded etcd", err: err})
		case <-hup:
			cfg.log.Info("SIGHUP: reloading files")
			for _, w := range cfg.reloads {
				w.reload(cfg.log, true)
			}
		case <-tick.C:
			for _, w := range cfg.reloads {
				w.reload(cfg.log, false)
			}
		}
	}
}

// storeFatal is what a fatal error of the embedded etcd calls, in place of
// etcd's exit with code 1: it logs why serve stops, and exits at once with
// ExitUnavailable. The store no longer works (the goroutine of etcd that
// failed is gone, and stopping it may never end); what it committed is on
// disk, and holders renew their locks after a restart or elsewhere.
func (cfg *serveConfig) storeFatal(err *embedetcd.FatalError) {
	cfg.log.Error("stopping", "reason", "the embedded etcd failed", "err", err.Error())
	exitNow := cfg.exit
	if exitNow == nil {
		exitNow = os.Exit
	}
	exitNow(ExitUnavailable)
}

// stop shuts down in order: the service refuses new calls and ends waits
// (Unavailable), the HTTP server lets calls in progress finish within
// --shutdown-timeout, then closes what is left. The store is closed by the
// caller; no lock is released.
func (cfg *serveConfig) stop(srv *server.Server, hs *http.Server, served <-chan struct{}) {
	srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.flags.shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		cfg.log.Warn("calls still in progress at the shutdown timeout were cut", "timeout", cfg.flags.shutdownTimeout, "err", err)
		_ = hs.Close()
	}
	<-served // Serve returns as soon as Shutdown or Close begins
}

// tlsMode is "off", "tls" or "mtls".
func (cfg *serveConfig) tlsMode() string {
	switch {
	case cfg.tls == nil:
		return "off"
	case cfg.tls.ClientAuth == tls.RequireAndVerifyClientCert:
		return "mtls"
	}
	return "tls"
}

// authMode is "tokens" or "off".
func (cfg *serveConfig) authMode() string {
	if cfg.flags.insecureNoAuth {
		return "off"
	}
	return "tokens"
}

// bannerView is the start banner as -o json prints it.
type bannerView struct {
	Listen    string `json:"listen"`
	URL       string `json:"url"`
	Dashboard string `json:"dashboard"`
	Metrics   string `json:"metrics"`
	Store     string `json:"store"`
	Auth      string `json:"auth"`
	Tokens    int    `json:"tokens,omitempty"`
	TLS       string `json:"tls"`
	Policy    string `json:"policy,omitempty"`
	Curl      string `json:"curl"`
}

// banner prints where the service listens, its store and a curl line that
// works as pasted (given $TOKEN when auth is on).
func (cfg *serveConfig) banner(addr, store string) error {
	base := baseURL(addr, cfg.tls != nil)
	v := bannerView{
		Listen: addr, URL: base, Dashboard: base + "/", Metrics: base + "/metrics", Store: store,
		Auth: cfg.authMode(), Tokens: cfg.keys.Len(), TLS: cfg.tlsMode(), Policy: cfg.flags.config,
		Curl: cfg.curlLine(base),
	}
	if cfg.asJSON {
		return writeJSON(cfg.out, v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "distlock serve: listening on %s (gRPC, gRPC-Web and Connect/JSON)\n", base)
	fmt.Fprintf(&b, "  store:   %s\n", store)
	if cfg.flags.insecureNoAuth {
		fmt.Fprintf(&b, "  auth:    off (--insecure-no-auth): every call is tenant %q with role admin\n", server.DefaultTenant)
	} else {
		fmt.Fprintf(&b, "  auth:    %d tokens from %s\n", cfg.keys.Len(), cfg.flags.tokens)
	}
	if cfg.tls != nil {
		fmt.Fprintf(&b, "  tls:     %s\n", map[string]string{"tls": "on", "mtls": "on, client certificates required (mTLS)"}[cfg.tlsMode()])
	}
	if cfg.flags.config != "" {
		fmt.Fprintf(&b, "  policy:  %s\n", cfg.flags.config)
	}
	signIn := "sign in with a token of the token file"
	if cfg.flags.insecureNoAuth {
		signIn = "no sign-in: auth is off"
	}
	fmt.Fprintf(&b, "  dashboard: %s (%s)\n", v.Dashboard, signIn)
	fmt.Fprintf(&b, "  metrics:   %s\n", v.Metrics)
	fmt.Fprintf(&b, "try:\n  %s\n", v.Curl)
	_, err := io.WriteString(cfg.out, b.String())
	return err
}

// baseURL returns the URL a local client reaches addr at: a wildcard
// address becomes the loopback address.
func baseURL(addr string, tls bool) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if ip.To4() != nil {
			host = "127.0.0.1"
		} else {
			host = "::1"
		}
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// curlLine returns a curl command that acquires the lock "demo".
func (cfg *serveConfig) curlLine(base string) string {
	parts := []string{"curl -sS"}
	if cfg.tls != nil && cfg.tls.ClientAuth == tls.RequireAndVerifyClientCert {
		parts = append(parts, "--cert client.pem --key client-key.pem")
	}
	parts = append(parts, "-H 'Content-Type: application/json'")
	if !cfg.flags.insecureNoAuth {
		parts = append(parts, `-H "Authorization: Bearer $TOKEN"`)
	}
	parts = append(parts, `-d '{"key":"demo","lease":"30s"}'`, base+"/distlock.v1.LockService/Acquire")
	return strings.Join(parts, " ")
}
