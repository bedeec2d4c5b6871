package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
	"github.com/distlock/distlock/internal/childproc"
	"github.com/distlock/distlock/internal/testserver"
)

// TestMain runs a client process of BenchmarkRemoteProcesses when asked
// to, and otherwise the tests, checking for leaks. A service process over the embedded etcd
// leaves goroutines of etcd's own lock service, which the benchmarks call:
// each Lock keeps its lease alive on the server's in-process client, which
// etcd never closes. Only such a process ignores them.
func TestMain(m *testing.M) {
	if code, child := childproc.Main(procEnv, procJob.run); child {
		os.Exit(code)
	}
	var etcds []goleak.Option
	if strings.HasPrefix(os.Getenv(remoteServeEnv), "embedded ") {
		etcds = append(etcds,
			goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter.(*chanStream).RecvMsg"),
			goleak.IgnoreTopFunction("go.etcd.io/etcd/client/v3.(*lessor).sendKeepAliveLoop"),
			goleak.IgnoreTopFunction("go.etcd.io/etcd/client/v3.(*lessor).deadlineLoop"),
			goleak.IgnoreTopFunction("go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*LeaseServer).LeaseKeepAlive"))
	}
	goleak.VerifyTestMain(m, etcds...)
}

// The tokens of the test keyring: two tenants with clients (two in alpha),
// a viewer, and an admin of a third.
const (
	alphaClient = "alpha-client-token-0001"
	alphaOther  = "alpha-client-token-0002"
	alphaViewer = "alpha-viewer-token-0001"
	betaClient  = "beta-client-token-00001"
	opsAdmin    = "ops-admin-token-0000001"
	alphaAdmin  = "alpha-tenant-admin-0001"
)

const tokenFile = alphaClient + " alpha client\n" +
	alphaOther + " alpha client\n" +
	alphaViewer + " alpha viewer\n" +
	betaClient + " beta client\n" +
	opsAdmin + " ops admin\n" +
	alphaAdmin + " alpha tenant-admin\n"

// store is a running store server that tests open clients on.
type store struct {
	name string
	open func(t *testing.T, opts ...distlock.ClientOption) *distlock.Client
}

// stores starts a real etcd and a real redis-server for t.
func stores(t *testing.T) []store {
	etcd, _ := etcdStore(t)
	rds := testserver.Redis(t)
	return []store{
		etcd,
		redisStore(t, rds.Addr()),
	}
}

// redisStore is a store over the redis-server at addr, through the client
// serve builds (redislock.Open, rueidis).
func redisStore(t testing.TB, addr string) store {
	return store{"redis", func(t *testing.T, opts ...distlock.ClientOption) *distlock.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := redislock.Open(ctx, "redis://"+addr)
		if err != nil {
			t.Fatal(err)
		}
		return distlock.New(b, opts...)
	}}
}

// forEachStore runs f as a subtest on each store.
func forEachStore(t *testing.T, f func(t *testing.T, st store)) {
	for _, st := range stores(t) {
		t.Run(st.name, func(t *testing.T) { f(t, st) })
	}
}

// env is a server on a loopback port over a store.
type env struct {
	t      *testing.T
	client *distlock.Client // the server's, also for checks behind its back
	srv    *server.Server
	http   *httptest.Server
	url    string
	reg    *prometheus.Registry
	logs   *syncBuffer
	h1     *http.Client // HTTP/1.1
	h2c    *http.Client // HTTP/2 without TLS
}

// newEnv starts a server over a new client of st, with the test keyring.
func newEnv(t *testing.T, st store, limits server.Limits) *env {
	t.Helper()
	return newEnvClient(t, st.open(t), limits)
}

func newEnvClient(t *testing.T, client *distlock.Client, limits server.Limits) *env {
	t.Helper()
	return newEnvConfig(t, server.Config{Client: client, Limits: limits})
}

// newEnvConfig starts a server of cfg with the test keyring, registry and
// logs.
func newEnvConfig(t *testing.T, cfg server.Config) *env {
	t.Helper()
	client := cfg.Client
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(tokenFile), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, client: client, reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	cfg.Keys, cfg.Registerer = keys, e.reg
	cfg.Logger = slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e.srv, err = server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.http = httptest.NewUnstartedServer(e.srv.Handler())
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	e.http.Config.Protocols = &p
	e.http.Start()
	e.url = e.http.URL
	e.h1 = &http.Client{Transport: &http.Transport{}}
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	e.h2c = &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	t.Cleanup(func() {
		e.srv.Shutdown()
		e.http.Close()
		e.h1.CloseIdleConnections()
		e.h2c.CloseIdleConnections()
		if err := client.Close(); err != nil {
			t.Errorf("client close: %v", err)
		}
	})
	return e
}

// post sends body (of length bytes, -1 if unknown) with header to
// procedure over HTTP/1.1 and returns the HTTP status and the Connect error
// code and message of the answer ("" if none).
func (e *env) post(t *testing.T, procedure string, body io.Reader, length int64, header http.Header) (int, string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), http.MethodPost, e.url+procedure, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength, req.Header = length, header
	res, err := e.h1.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	var v struct{ Code, Message string }
	_ = json.Unmarshal(data, &v)
	return res.StatusCode, v.Code, v.Message
}

// api returns a Connect client of the service speaking as token, with more
// options (connect.WithGRPC(), say).
func (e *env) api(token string, opts ...connect.ClientOption) distlockv1connect.LockServiceClient {
	opts = append([]connect.ClientOption{connect.WithInterceptors(bearer(token))}, opts...)
	return distlockv1connect.NewLockServiceClient(e.h2c, e.url, opts...)
}

// bearer is an interceptor that sends token as the bearer token, unless it
// is empty.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if b != "" {
			req.Header().Set("Authorization", "Bearer "+string(b))
		}
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		if b != "" {
			conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		}
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// ctx returns a context for one call, ended with the test.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

// acquire takes key as token through api, failing the test if it cannot.
func acquire(t *testing.T, api distlockv1connect.LockServiceClient, req *distlockv1.AcquireRequest) *distlockv1.AcquireResponse {
	t.Helper()
	res, err := api.Acquire(ctx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("acquire %q: %v", req.GetKey(), err)
	}
	return res.Msg
}

// inspect reports key through api, failing the test on an error.
func inspect(t *testing.T, api distlockv1connect.LockServiceClient, key string) *distlockv1.Lock {
	t.Helper()
	res, err := api.Inspect(ctx(t), connect.NewRequest(&distlockv1.InspectRequest{Key: key}))
	if err != nil {
		t.Fatalf("inspect %q: %v", key, err)
	}
	return res.Msg.GetLock()
}

// list returns the keys under prefix through api, every page.
func list(t *testing.T, api distlockv1connect.LockServiceClient, prefix string) []string {
	t.Helper()
	var keys []string
	req := &distlockv1.ListRequest{Prefix: prefix}
	for range 100 {
		res, err := api.List(ctx(t), connect.NewRequest(req))
		if err != nil {
			t.Fatalf("list %q: %v", prefix, err)
		}
		for _, l := range res.Msg.GetLocks() {
			keys = append(keys, l.GetKey())
		}
		if res.Msg.GetNextPageToken() == "" {
			return keys
		}
		req.PageToken = res.Msg.GetNextPageToken()
	}
	t.Fatalf("list %q: more than 100 pages", prefix)
	return nil
}

// wantCode fails the test unless err has code.
func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want %v", what, code)
		return
	}
	if got := connect.CodeOf(err); got != code {
		t.Errorf("%s: %v (code %v), want code %v", what, err, got, code)
	}
}

// keyFor is a key unique to the test.
func keyFor(t *testing.T, name string) string {
	return strings.ReplaceAll(t.Name(), "/", ".") + "/" + name
}

// eventually polls cond every 50ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent logging.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// records returns the JSON log records with message msg.
func (b *syncBuffer) records(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}
