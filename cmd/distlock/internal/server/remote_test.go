package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/embedetcd"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// The tests of this file run the Go client of the service
// (backend/remotelock) against the service over real stores: the
// conformance suite, then what is particular to a client of a service
// (tokens, roles, protocols, the loss watch, a service shutting down).

// The tokens of the keyring of the service these tests start.
const (
	remoteAdmin  = "remote-admin-token-00001" // tenant acme, admin
	remoteClient = "remote-client-token-0001" // tenant acme, client
	remoteViewer = "remote-viewer-token-0001" // tenant acme, viewer
	remoteTenant = "acme"

	remoteOther       = "remote-other-token-00001" // tenant other, client
	remoteOtherTenant = "other"
)

// remoteStore is a store a service runs over, for these tests.
type remoteStore struct {
	name string // "etcd", "redis", or "embedded" (serve's default store)
	// The store's address, as remoteStoreBackend takes it; for "embedded",
	// the data directory of the etcd the service's process runs.
	addr string
}

// backend returns a new backend of the store: for the service, for a
// benchmark's direct path, or for a test's look behind the service.
func (st remoteStore) backend(t testing.TB) driver.Backend {
	b, err := remoteStoreBackend(st.name, st.addr)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// remoteStoreBackend returns a new backend of the store name at addr: etcd
// (addr is a comma-separated list of endpoints), or Redis (addr is one
// address, or a comma-separated list of a cluster's nodes), opened as serve
// opens a store URL, so that the service under test and the direct path
// of the benchmarks use the client serve uses.
func remoteStoreBackend(name, addr string) (driver.Backend, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch name {
	case "embedded": // another process's view of it, through its socket
		return etcdlock.Dial(ctx, clientv3.Config{Endpoints: []string{embeddedEndpoint(addr)}}, etcdlock.WithKeyLayout(etcdlock.KeyLayoutOrdered))
	case "etcd":
		// The ordered key layout, and so linked queues, as serve's
		// embedded etcd has: only this release's backends share the store.
		return etcdlock.Dial(ctx, clientv3.Config{Endpoints: strings.Split(addr, ",")}, etcdlock.WithKeyLayout(etcdlock.KeyLayoutOrdered))
	case "redis":
		first, rest, cluster := strings.Cut(addr, ",")
		if !cluster {
			return redislock.Open(ctx, "redis://"+addr)
		}
		return redislock.Open(ctx, "redis-cluster://"+first+"?addr="+strings.ReplaceAll(rest, ",", "&addr="))
	}
	return nil, fmt.Errorf("unknown store %q", name)
}

// embeddedStore is serve's default store, an etcd that the service's
// process runs in dir (embedetcd), reached by its backend in-process.
func embeddedStore(t testing.TB) remoteStore {
	return remoteStore{"embedded", t.TempDir()}
}

// embeddedEndpoint is the socket of the embedded etcd of data directory
// dir, for a client in another process.
func embeddedEndpoint(dir string) string { return "unix://" + filepath.Join(dir, "etcd.sock") }

// remoteStores starts a real etcd and a real redis-server for t.
func remoteStores(t testing.TB) []remoteStore {
	etcd := testserver.Etcd(t)
	rds := testserver.Redis(t)
	return []remoteStore{{"etcd", testserver.EtcdEndpoint(etcd)}, {"redis", rds.Addr()}}
}

// remoteService is the lock service in a process of its own (this test
// binary, running TestRemoteServiceProcess), on a loopback port, speaking
// HTTP/1.1 and h2c. Its own process keeps its goroutines, its garbage and
// its scheduling apart from the client's, as in production: the suite's
// leak check sees the client's goroutines only.
type remoteService struct {
	store *distlock.Client // the store, behind the service's back
	addr  string           // host:port
	url   string           // http://host:port
	stdin io.WriteCloser   // "shutdown\n" shuts the service down; EOF ends the process
	log   *remoteOutput    // the service's standard error: its warnings, the audit log's among them
	pid   int              // the service's process
}

// The environment of TestRemoteServiceProcess.
const (
	remoteServeEnv = "DISTLOCK_TEST_REMOTE_SERVE" // store name and address: "redis 127.0.0.1:6379"
	remoteRateEnv  = "DISTLOCK_TEST_REMOTE_RATE"  // "rate burst"; unset: no rate limit
	// The most waiters per tenant; unset: the default.
	remoteWaitersEnv = "DISTLOCK_TEST_REMOTE_WAITERS"
	remoteTLSEnv     = "DISTLOCK_TEST_REMOTE_TLS" // "cert.pem key.pem": serve HTTPS; unset: h2c
	// Routes, as "prefix=name addr" separated by ";": the keys under
	// prefix in the store name at addr.
	remoteRoutesEnv = "DISTLOCK_TEST_REMOTE_ROUTES"
	// Where each service process writes its CPU profile (the path, a dot
	// and its pid: a benchmark may start several), to see where a
	// benchmark's time goes on the service's side:
	//	DISTLOCK_TEST_SERVICE_CPUPROFILE=/tmp/svc.pprof go test -run '^$' -bench BenchmarkRemote ./internal/server
	remoteProfileEnv = "DISTLOCK_TEST_SERVICE_CPUPROFILE"
)

// startRemoteService starts a service over st with the keyring of the
// tokens above and no rate limit (the suite makes thousands of calls a
// second), and stops it when t ends.
func startRemoteService(t testing.TB, st remoteStore) *remoteService {
	t.Helper()
	return startRemoteServiceEnv(t, st)
}

// startRemoteServiceRate is startRemoteService with a rate limit per
// tenant, as "rate burst" (calls a second, calls at once).
func startRemoteServiceRate(t testing.TB, st remoteStore, rate string) *remoteService {
	t.Helper()
	return startRemoteServiceEnv(t, st, remoteRateEnv+"="+rate)
}

// startRemoteServiceEnv is startRemoteService with more environment for
// the service's process.
func startRemoteServiceEnv(t testing.TB, st remoteStore, env ...string) *remoteService {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRemoteServiceProcess$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(append(os.Environ(), remoteServeEnv+"="+st.name+" "+st.addr), env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &remoteOutput{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() { // the first line is the address; the rest goes
			select {
			case lines <- sc.Text():
			default:
			}
		}
		exited <- cmd.Wait()
	}()
	stop := func() error {
		_ = stdin.Close()
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("still running 30s after its stdin closed: %v", <-exited)
		}
	}
	var addr string
	select {
	case line := <-lines:
		addr = strings.TrimPrefix(line, "listening ")
	case <-time.After(30 * time.Second):
		_ = stop()
		t.Fatalf("the service did not start within 30s:\n%s", stderr.String())
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		_ = stop()
		t.Fatalf("the service said %q:\n%s", addr, stderr.String())
	}
	store := distlock.New(st.backend(t))
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("the service's process: %v\n%s", err, stderr.String())
		}
		if err := store.Close(); err != nil {
			t.Errorf("close the store's client: %v", err)
		}
	})
	return &remoteService{store: store, addr: addr, url: "http://" + addr, stdin: stdin, log: stderr, pid: cmd.Process.Pid}
}

// remoteOutput collects a process's output, for the test's errors.
type remoteOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (o *remoteOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *remoteOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// shutdown calls the service's Shutdown; it goes on serving, with
// Unavailable, until t ends.
func (s *remoteService) shutdown(t testing.TB) {
	t.Helper()
	if _, err := io.WriteString(s.stdin, "shutdown\n"); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteServiceProcess is the service of startRemoteService, in the
// process it starts; without its environment it skips. It prints
// "listening ADDR", serves until its stdin ends, and calls Shutdown when a
// line "shutdown" comes.
func TestRemoteServiceProcess(t *testing.T) {
	spec := os.Getenv(remoteServeEnv)
	if spec == "" {
		t.Skip("the service process of the remote tests, started by them")
	}
	name, addr, _ := strings.Cut(spec, " ")
	if path := os.Getenv(remoteProfileEnv); path != "" {
		f, err := os.Create(fmt.Sprintf("%s.%d", path, os.Getpid()))
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			t.Fatal(err)
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	limits := server.Limits{RatePerTenant: math.Inf(1)}
	if r := os.Getenv(remoteRateEnv); r != "" {
		if _, err := fmt.Sscan(r, &limits.RatePerTenant, &limits.Burst); err != nil {
			t.Fatalf("%s=%q: %v", remoteRateEnv, r, err)
		}
	}
	if w := os.Getenv(remoteWaitersEnv); w != "" {
		if _, err := fmt.Sscan(w, &limits.MaxWaitersPerTenant); err != nil {
			t.Fatalf("%s=%q: %v", remoteWaitersEnv, w, err)
		}
	}
	path := filepath.Join(t.TempDir(), "tokens")
	keyring := remoteAdmin + " " + remoteTenant + " admin\n" +
		remoteClient + " " + remoteTenant + " client\n" +
		remoteViewer + " " + remoteTenant + " viewer\n" +
		remoteOther + " " + remoteOtherTenant + " client\n"
	if err := os.WriteFile(path, []byte(keyring), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var b driver.Backend
	if name == "embedded" {
		e, err := embedetcd.Start(t.Context(), addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := e.Close(); err != nil {
				t.Errorf("close the embedded store: %v", err)
			}
		}()
		b, err = e.Backend(t.Context(), nil)
		if err != nil {
			t.Fatal(err)
		}
	} else if b, err = remoteStoreBackend(name, addr); err != nil {
		t.Fatal(err)
	}
	client := distlock.New(b)
	defer func() {
		if err := client.Close(); err != nil {
			t.Errorf("close the service's client: %v", err)
		}
	}()
	routes := remoteRoutes(t, os.Getenv(remoteRoutesEnv))
	warnings := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := server.New(server.Config{Client: client, Routes: routes, Keys: keys, Limits: limits, Logger: warnings})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	hs := &http.Server{Handler: srv.Handler(), Protocols: &p, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	if certs := os.Getenv(remoteTLSEnv); certs != "" {
		cert, key, _ := strings.Cut(certs, " ")
		go func() { served <- hs.ServeTLS(l, cert, key) }()
	} else {
		go func() { served <- hs.Serve(l) }()
	}
	fmt.Println("listening", l.Addr())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() { // until the parent closes stdin, or dies
		if sc.Text() == "shutdown" {
			srv.Shutdown()
		}
	}
	srv.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		t.Errorf("http shutdown: %v", err)
		_ = hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve: %v", err)
	}
}

// remoteRoutes opens the stores of spec (remoteRoutesEnv's form), closed
// when t ends.
func remoteRoutes(t *testing.T, spec string) []server.Route {
	var routes []server.Route
	for r := range strings.SplitSeq(spec, ";") {
		if r == "" {
			continue
		}
		prefix, store, _ := strings.Cut(r, "=")
		name, addr, _ := strings.Cut(store, " ")
		b, err := remoteStoreBackend(name, addr)
		if err != nil {
			t.Fatal(err)
		}
		c := distlock.New(b)
		t.Cleanup(func() { _ = c.Close() })
		routes = append(routes, server.Route{Prefix: prefix, Client: c})
	}
	return routes
}

// remoteBackendAt returns a remotelock backend of its own (own connection) to
// the service at addr, speaking as token; the suite or t closes it.
func remoteBackendAt(t testing.TB, addr, token string, opts ...remotelock.Option) *remotelock.Backend {
	t.Helper()
	b, err := remotelock.New(nil, "http://"+addr, append([]remotelock.Option{remotelock.WithToken(token)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// deleteKey removes a client's key behind its holder's back, as an
// operator of the store would.
func (s *remoteService) deleteKey(t testing.TB, key string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.store.ForceRelease(ctx, "tenants/"+remoteTenant+"/"+key, "test: deleted behind the holder's back"); err != nil {
		t.Fatalf("delete %q in the store: %v", key, err)
	}
}

// TestRemoteConformance runs the conformance suite through remotelock
// against the service over etcd, and its part that a store can change
// over Redis. The fault tests put their
// proxy between the client and the service.
func TestRemoteConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	for _, st := range remoteStores(t) {
		t.Run(st.name, func(t *testing.T) {
			svc := startRemoteService(t, st)
			run := locktest.Run
			if st.name != "etcd" {
				run = locktest.RunTopology // the service is the same code over each store
			}
			notify := time.Duration(0) // the suite's default
			if st.name == "etcd" {
				// A release reaches a waiter through etcd's watch:
				// etcdlock's own harness allows as long.
				notify = 150 * time.Millisecond
			}
			run(t, locktest.Harness{
				NotifyLatency: notify,
				NewBackend:    func(t testing.TB) driver.Backend { return remoteBackendAt(t, svc.addr, remoteAdmin) },
				DeleteKey:     svc.deleteKey,
				StoreAddr:     svc.addr,
				MaxKeyLen:     server.DefaultMaxKeyLen,
				NewBackendAt: func(t testing.TB, addr string) driver.Backend {
					return remoteBackendAt(t, addr, remoteAdmin)
				},
			})
		})
	}
}

// remoteCtx is a test's context, bounded.
func remoteCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// remoteKey is a key of its own for one test.
func remoteKey(t *testing.T) string {
	return "remote/" + strings.ReplaceAll(t.Name(), "/", ".") + "/" + time.Now().Format("150405.000000000")
}

// TestRemoteOpen: distlock.Open reaches the service with the token of
// token_file or $DISTLOCK_TOKEN, over h2c, HTTP/1.1 and gRPC; the service's
// refusals come back as its codes, and never as a lock's sentinel.
func TestRemoteOpen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	st := remoteStores(t)[0]
	svc := startRemoteService(t, st)
	dir := t.TempDir()
	tokenFile := func(name, token string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	client, viewer, stranger := tokenFile("client", remoteClient), tokenFile("viewer", remoteViewer), tokenFile("stranger", "not-a-known-token-000001")
	ctx := remoteCtx(t)

	open := func(t *testing.T, rawURL string) *distlock.Client {
		t.Helper()
		c, err := distlock.Open(ctx, rawURL)
		if err != nil {
			t.Fatalf("open %s: %v", rawURL, err)
		}
		t.Cleanup(func() {
			if err := c.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return c
	}
	// lockOnce takes, inspects and releases a key through c.
	lockOnce := func(t *testing.T, c *distlock.Client) {
		t.Helper()
		key := remoteKey(t)
		l, err := c.Lock(ctx, key, distlock.WithOwner("open-test"), distlock.WithMetadata(map[string]string{"via": "open"}))
		if err != nil {
			t.Fatalf("lock: %v", err)
		}
		info, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("inspect: %v", err)
		}
		if !info.Held || info.Fence != l.Fence() || info.Meta.Owner != "open-test" || info.Meta.Labels["via"] != "open" {
			t.Fatalf("inspect = %+v, want held with fence %d, the owner and the label", info, l.Fence())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	for name, q := range map[string]string{
		"h2c":      "",
		"http1.1":  "&h2c=false",
		"grpc":     "&protocol=grpc",
		"watching": "&watch_loss=true&request_timeout=2s&max_wait=10s",
	} {
		t.Run(name, func(t *testing.T) {
			lockOnce(t, open(t, "distlock://"+svc.addr+"?token_file="+client+q))
		})
	}
	t.Run("env", func(t *testing.T) {
		t.Setenv(remotelock.TokenEnv, remoteClient)
		lockOnce(t, open(t, "distlock://"+svc.addr))
	})
	t.Run("unknown token", func(t *testing.T) {
		c := open(t, "distlock://"+svc.addr+"?token_file="+stranger)
		_, err := c.TryLock(ctx, remoteKey(t))
		if connect.CodeOf(err) != connect.CodeUnauthenticated || errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("lock with an unknown token: got %v, want Unauthenticated and not ErrNotAcquired", err)
		}
		if strings.Contains(err.Error(), "not-a-known-token") {
			t.Fatalf("the error shows the token: %v", err)
		}
	})
	t.Run("viewer", func(t *testing.T) {
		c := open(t, "distlock://"+svc.addr+"?token_file="+viewer)
		key := remoteKey(t)
		if _, err := c.TryLock(ctx, key); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Fatalf("lock as a viewer: got %v, want PermissionDenied", err)
		}
		if info, err := c.Inspect(ctx, key); err != nil || info.Held {
			t.Fatalf("inspect as a viewer: %+v, %v; want a free key", info, err)
		}
	})
}

// TestRemoteTLS: distlocks:// reaches a service over HTTPS, trusting the
// certificate of ca_file, with the Connect protocol and with gRPC; without
// ca_file the certificate is refused.
func TestRemoteTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	dir := t.TempDir()
	cert, key := remoteCert(t, dir)
	svc := startRemoteServiceEnv(t, remoteStores(t)[1], remoteTLSEnv+"="+cert+" "+key)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(remoteClient), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := remoteCtx(t)
	for _, q := range []string{"", "&protocol=grpc"} {
		c, err := distlock.Open(ctx, "distlocks://"+svc.addr+"?ca_file="+cert+"&token_file="+tokenFile+q)
		if err != nil {
			t.Fatalf("open%s: %v", q, err)
		}
		l, err := c.TryLock(ctx, remoteKey(t))
		if err != nil {
			t.Fatalf("lock%s: %v", q, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release%s: %v", q, err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := distlock.Open(ctx, "distlocks://"+svc.addr+"?token_file="+tokenFile); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("open without the CA: got %v, want a certificate error", err)
	}
}

// remoteCert writes a self-signed certificate for 127.0.0.1 and its key
// into dir and returns their paths.
func remoteCert(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "distlock test"},
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestRemoteMapping: what the service says comes back as the driver's
// sentinels, a retried acquisition is idempotent, and a lease runs from a
// grant's confirmation after a long wait.
func TestRemoteMapping(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	for _, st := range remoteStores(t) {
		t.Run(st.name, func(t *testing.T) {
			svc := startRemoteService(t, st)
			ctx := remoteCtx(t)
			b := remoteBackendAt(t, svc.addr, remoteClient)
			key := remoteKey(t)
			req := driver.AcquireRequest{Key: key, Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
			g, err := b.Acquire(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			again, err := b.Acquire(ctx, req)
			if err != nil || again.Fence != g.Fence {
				t.Fatalf("a retried acquisition: %+v, %v; want the same grant (fence %d)", again, err, g.Fence)
			}
			other := remoteBackendAt(t, svc.addr, remoteClient)
			if _, err := other.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "fedcba9876543210fedcba9876543210", TTL: time.Minute}); !errors.Is(err, driver.ErrNotAcquired) || strings.Contains(err.Error(), key) {
				t.Fatalf("acquire of a held key: got %v, want ErrNotAcquired, leaving the key to the client to name", err)
			}
			// Another backend does not know this acquisition's token.
			if err := other.Release(ctx, key, req.Token); !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("release through another backend: got %v, want ErrNotHeld", err)
			}
			long := strings.Repeat("k", server.DefaultMaxKeyLen+1)
			if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: long, Token: req.Token, TTL: time.Minute}); !errors.Is(err, driver.ErrInvalidKey) {
				t.Fatalf("a key over the service's limit: got %v, want ErrInvalidKey", err)
			}
			if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key + "/x", Token: req.Token, TTL: 2 * time.Hour}); !errors.Is(err, driver.ErrInvalidOption) {
				t.Fatalf("a lease over the service's limit: got %v, want ErrInvalidOption", err)
			}
			if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: key + "/y", Token: "short", TTL: time.Minute}); !errors.Is(err, driver.ErrInvalidOption) {
				t.Fatalf("a token too short for a request id: got %v, want ErrInvalidOption", err)
			}
			if _, err := b.ForceRelease(ctx, key, driver.ForceOptions{}); connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Fatalf("force release as a client: got %v, want PermissionDenied", err)
			}

			// A waiter granted after a long wait counts its lease from a
			// renewal made after the grant, not from its request.
			waiter := remoteBackendAt(t, svc.addr, remoteClient)
			wreq := driver.AcquireRequest{Key: key, Token: "00112233445566778899aabbccddeeff", TTL: 2 * time.Second}
			type result struct {
				g   driver.Grant
				err error
			}
			got := make(chan result, 1)
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			go func() {
				g, err := waiter.AcquireWait(wctx, wreq)
				got <- result{g, err}
			}()
			time.Sleep(time.Second) // a wait longer than a tenth of the waiter's TTL
			released := time.Now()
			if err := b.Release(ctx, key, req.Token); err != nil {
				t.Fatal(err)
			}
			r := <-got
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			if r.g.Fence <= g.Fence {
				t.Fatalf("waiter's fence %d not above %d", r.g.Fence, g.Fence)
			}
			if r.g.Sent.Before(released) {
				t.Fatalf("the waiter's lease counts from %v, before the key was released at %v", r.g.Sent, released)
			}
			if err := waiter.Renew(ctx, key, wreq.Token, time.Minute); err != nil {
				t.Fatalf("renew by the waiter: %v", err)
			}
			if err := waiter.Release(ctx, key, wreq.Token); err != nil {
				t.Fatalf("release by the waiter: %v", err)
			}
			if err := waiter.Release(ctx, key, wreq.Token); !errors.Is(err, driver.ErrNotHeld) {
				t.Fatalf("second release: got %v, want ErrNotHeld", err)
			}
		})
	}
}

// lossWatchClients returns a client of the service at holderAddr that
// follows the loss stream, once the stream is live, and an admin client of
// the service at adminAddr. Both end with t.
func lossWatchClients(t *testing.T, holderAddr, adminAddr string) (holder, admin *distlock.Client) {
	t.Helper()
	holder = distlock.New(remoteBackendAt(t, holderAddr, remoteClient, remotelock.WithLossWatch()))
	t.Cleanup(func() { _ = holder.Close() })
	admin = distlock.New(remoteBackendAt(t, adminAddr, remoteAdmin))
	t.Cleanup(func() { _ = admin.Close() })
	// The stream starts with the first grant and misses what comes before
	// it is live: warm it up with a lock of its own.
	ctx := remoteCtx(t)
	warm, err := holder.TryLock(ctx, remoteKey(t)+"/warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = warm.Release(ctx)
	time.Sleep(500 * time.Millisecond)
	return holder, admin
}

// awaitForcedOut fails t unless l, force-released at start, is lost within
// 5s: long before its next renewal, 20s away for a minute's lease.
func awaitForcedOut(t *testing.T, l *distlock.Lock, start time.Time) {
	t.Helper()
	select {
	case <-l.Done():
		t.Logf("the holder learned of the forced release after %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		t.Fatal("the holder did not learn of the forced release within 5s")
	}
	if !errors.Is(l.Err(), distlock.ErrLockLost) {
		t.Fatalf("Err = %v, want ErrLockLost", l.Err())
	}
}

// TestRemoteLossWatch: with WithLossWatch a holder learns that an admin
// force-released its lock within moments, long before its next renewal.
func TestRemoteLossWatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	st := remoteStores(t)[1]
	svc := startRemoteService(t, st)
	ctx := remoteCtx(t)
	holder, admin := lossWatchClients(t, svc.addr, svc.addr)

	key := remoteKey(t)
	l, err := holder.TryLock(ctx, key, distlock.WithLease(time.Minute), distlock.WithWatchdog(true))
	if err != nil {
		t.Fatal(err)
	}
	const reason = "test: stuck holder"
	start := time.Now()
	info, err := admin.ForceRelease(ctx, key, reason)
	if err != nil {
		t.Fatal(err)
	}
	if info.Fence != l.Fence() {
		t.Fatalf("force release reported fence %d, want %d", info.Fence, l.Fence())
	}
	awaitForcedOut(t, l, start)
	// The reason reaches the service's audit log as the call's argument; a
	// direct call without one is logged with remotelock.DefaultReason.
	fr := admin.Backend().(driver.ForceReleaser)
	if _, err := fr.ForceRelease(ctx, key, driver.ForceOptions{}); !errors.Is(err, distlock.ErrNotHeld) {
		t.Fatalf("force release of the freed key: %v, want ErrNotHeld", err)
	}
	for _, want := range []string{reason, remotelock.DefaultReason} {
		deadline := time.Now().Add(5 * time.Second)
		for !strings.Contains(svc.log.String(), strconv.Quote(want)) {
			if time.Now().After(deadline) {
				t.Fatalf("the service's log has no reason %q:\n%s", want, svc.log.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// TestRemoteLossWatchOtherInstance: a forced release through another
// instance reaches the holder's instance only as its key gone, told as a
// release; the holder, which did not release, asks the service at once
// and learns of its loss, long before its next renewal. Its own releases
// are no loss.
func TestRemoteLossWatchOtherInstance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	st := remoteStores(t)[0]
	mine, other := startRemoteService(t, st), startRemoteService(t, st)
	ctx := remoteCtx(t)
	holder, admin := lossWatchClients(t, mine.addr, other.addr)

	for i := range 5 { // released by their holder: no loss, and no error
		l, err := holder.TryLock(ctx, fmt.Sprintf("%s/own/%d", remoteKey(t), i), distlock.WithLease(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("own release %d: %v", i, err)
		}
	}
	key := remoteKey(t)
	l, err := holder.TryLock(ctx, key, distlock.WithLease(time.Minute), distlock.WithWatchdog(true))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := admin.ForceRelease(ctx, key, "test: through another instance"); err != nil {
		t.Fatal(err)
	}
	awaitForcedOut(t, l, start)
}

// TestRemoteShutdown: a service shutting down ends a wait with
// Unavailable, which is not ErrClosed (the backend is open; another
// service may serve it), and a closed backend says ErrClosed.
func TestRemoteShutdown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	st := remoteStores(t)[0]
	svc := startRemoteService(t, st)
	ctx := remoteCtx(t)
	holder := remoteBackendAt(t, svc.addr, remoteClient)
	key := remoteKey(t)
	req := driver.AcquireRequest{Key: key, Token: "0123456789abcdef0123456789abcdef", TTL: time.Minute}
	if _, err := holder.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	waiter := remoteBackendAt(t, svc.addr, remoteClient)
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.AcquireWait(ctx, driver.AcquireRequest{Key: key, Token: "fedcba9876543210fedcba9876543210", TTL: time.Minute})
		errc <- err
	}()
	time.Sleep(300 * time.Millisecond) // the waiter waits in the service
	svc.shutdown(t)
	select {
	case err := <-errc:
		if connect.CodeOf(err) != connect.CodeUnavailable || errors.Is(err, driver.ErrClosed) || errors.Is(err, driver.ErrNotAcquired) {
			t.Fatalf("wait ended by the service's shutdown: got %v, want Unavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the service's shutdown did not end the wait within 5s")
	}
	if err := waiter.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Inspect(ctx, key); !errors.Is(err, driver.ErrClosed) {
		t.Fatalf("inspect after Close: got %v, want ErrClosed", err)
	}
	// The lock outlives the service's shutdown: the store still holds it.
	info, err := svc.store.Inspect(ctx, "tenants/"+remoteTenant+"/"+key)
	if err != nil || !info.Held {
		t.Fatalf("after shutdown the store has %+v, %v; want the lock held", info, err)
	}
}

// TestRemoteRateLimited: a tenant over its rate gets RESOURCE_EXHAUSTED for
// a try, which is neither ErrNotAcquired nor a lost lock, while a wait and
// a release go on through the refusals.
func TestRemoteRateLimited(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and redis-server")
	}
	st := remoteStores(t)[0]
	// One call a second: the try after the burst is spent must find no token
	// refilled however slow a loaded machine makes the test between them.
	svc := startRemoteServiceRate(t, st, "1 3")
	ctx := remoteCtx(t)
	c := distlock.New(remoteBackendAt(t, svc.addr, remoteClient))
	t.Cleanup(func() { _ = c.Close() })
	key := remoteKey(t)
	var err error
	for range 10 { // past the burst
		if _, err = c.Inspect(ctx, key); err != nil {
			break
		}
	}
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("inspect past the burst: got %v, want ResourceExhausted", err)
	}
	if _, err := c.TryLock(ctx, key); connect.CodeOf(err) != connect.CodeResourceExhausted || errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("try past the rate: got %v, want ResourceExhausted and not ErrNotAcquired", err)
	}
	l, err := c.Lock(ctx, key, distlock.WithWait(10*time.Second), distlock.WithLease(time.Minute), distlock.WithWatchdog(false))
	if err != nil {
		t.Fatalf("a wait through the rate limit: %v", err)
	}
	for range 5 { // over the rate again: the release waits its turn
		_, _ = c.Inspect(ctx, key)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release past the rate: %v", err)
	}
	if info, err := svc.store.Inspect(ctx, "tenants/"+remoteTenant+"/"+key); err != nil || info.Held {
		t.Fatalf("after the release the store has %+v, %v; want the key free", info, err)
	}
}
