package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/chromedp/chromedp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/dashboard"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
	"github.com/distlock/distlock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tokens of the test keyring: a client and a viewer of tenant alpha, a
// client of tenant beta, an admin of tenant ops, and a tenant admin of
// alpha.
const (
	alphaClient = "alpha-client-token-0001"
	alphaViewer = "alpha-viewer-token-0001"
	betaClient  = "beta-client-token-00001"
	opsAdmin    = "ops-admin-token-0000001"
	alphaAdmin  = "alpha-tenant-admin-0001"
)

const tokenFile = alphaClient + " alpha client\n" +
	alphaViewer + " alpha viewer\n" +
	betaClient + " beta client\n" +
	opsAdmin + " ops admin\n" +
	alphaAdmin + " alpha tenant-admin\n"

// chromium is the browser the tests drive (the Debian package, installed
// by make deps).
const chromium = "/usr/bin/chromium"

// service is the lock service with its dashboard, mounted as distlock serve
// mounts them, on a loopback port over a real etcd.
type service struct {
	srv  *server.Server
	http *httptest.Server
	url  string
	logs *syncBuffer
	h2c  *http.Client
}

// newService starts a service over a new etcd.
func newService(t *testing.T) *service {
	t.Helper()
	etcd := testserver.Etcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := etcdlock.Dial(ctx, clientv3.Config{Endpoints: []string{testserver.EtcdEndpoint(etcd)}})
	if err != nil {
		t.Fatal(err)
	}
	client := distlock.New(b)
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(tokenFile), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &service{logs: &syncBuffer{}}
	s.srv, err = server.New(server.Config{Client: client, Keys: keys,
		Logger: slog.New(slog.NewJSONHandler(s.logs, nil)), MaxHold: testMaxHold})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", s.srv.Handler())
	s.http = httptest.NewUnstartedServer(mux)
	dash, err := dashboard.New(dashboard.Config{Server: s.srv, Addr: s.http.Listener.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	dash.Register(mux)
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	s.http.Config.Protocols = &p
	s.http.Start()
	s.url = s.http.URL
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	s.h2c = &http.Client{Transport: &http.Transport{Protocols: &h2c}}
	t.Cleanup(func() {
		s.srv.Shutdown()
		s.http.CloseClientConnections()
		s.http.Close()
		s.h2c.CloseIdleConnections()
		if err := client.Close(); err != nil {
			t.Errorf("client close: %v", err)
		}
	})
	return s
}

// testMaxHold caps the keys named near-max-hold at 3s.
func testMaxHold(sk string) time.Duration {
	if strings.HasSuffix(sk, "/near-max-hold") {
		return 3 * time.Second
	}
	return 0
}

// api is a client of the service's API speaking as token.
func (s *service) api(token string) distlockv1connect.LockServiceClient {
	return distlockv1connect.NewLockServiceClient(s.h2c, s.url, connect.WithInterceptors(bearer(token)))
}

// bearer is an interceptor that sends its token as the bearer token.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		conn.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return conn
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// callCtx is the context of one API call or browser step: bounded, and
// ended with the test.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// acquire takes key through api, failing the test if it cannot.
func acquire(t *testing.T, api distlockv1connect.LockServiceClient, req *distlockv1.AcquireRequest) *distlockv1.AcquireResponse {
	t.Helper()
	if req.Lease == nil {
		req.Lease = durationpb.New(time.Minute)
	}
	res, err := api.Acquire(callCtx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("acquire %q: %v", req.GetKey(), err)
	}
	return res.Msg
}

// release frees key through api, failing the test if it cannot.
func release(t *testing.T, api distlockv1connect.LockServiceClient, key, token string) {
	t.Helper()
	if _, err := api.Release(callCtx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: key, Token: token})); err != nil {
		t.Fatalf("release %q: %v", key, err)
	}
}

// keyFor is a key unique to the test.
func keyFor(t *testing.T, name string) string {
	safe := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r == '/':
			return '.'
		}
		return -1
	}, t.Name())
	return "dash/" + safe + "/" + name
}

// browser starts headless Chromium for the test and returns its context;
// each tab opens its own browser context (no shared cookies). Every step
// is bounded by the test's deadline of 5 minutes.
func browser(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("a real browser: not with -short")
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Fatalf("no Chromium at %s (make deps installs the Debian package chromium): %v", chromium, err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.Flag("lang", "en-US"),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root without it
	}
	limit, cancelLimit := context.WithTimeout(context.Background(), 5*time.Minute)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(limit, opts...)
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		cancelLimit()
		t.Fatalf("start Chromium: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(bctx, 10*time.Second)
		defer cancel()
		_ = chromedp.Cancel(cctx)
		cancelBrowser()
		cancelAlloc()
		cancelLimit()
	})
	return bctx
}

// tab opens a tab in a browser context of its own, for the test.
func tab(t *testing.T, bctx context.Context) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(bctx, chromedp.WithNewBrowserContext())
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	return ctx
}

// do runs browser steps within 20 seconds, failing the test on an error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// html is the page's current HTML, read through the DOM (no page script).
// A read that a reload cuts short (the static page reloads itself) is
// tried again, for up to 10 seconds.
func html(t *testing.T, ctx context.Context) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := chromedp.Run(sctx, chromedp.OuterHTML(chromedp.CSS("html")))
		cancel()
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("read the page: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitFor polls the JavaScript condition cond every 20ms until it is true
// or d passes, and returns how long it took.
func waitFor(t *testing.T, ctx context.Context, d time.Duration, what, cond string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if eval[bool](t, ctx, cond) {
			return time.Since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// login opens the page and signs in with token, waiting for the dashboard
// (and, with scripts on, its live stream).
func login(t *testing.T, ctx context.Context, url, token string, scripts bool) {
	t.Helper()
	do(t, ctx, "open the login form",
		chromedp.Navigate(url+"/"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SetValue(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#locks")),
	)
	if scripts {
		waitFor(t, ctx, 5*time.Second, "the live stream", `window.distlockDashboard && window.distlockDashboard.messages > 0`)
	}
}

// row is a JavaScript expression for the held-lock row of tenant/key.
func row(tenant, key string) string {
	b, _ := json.Marshal(`#locks-body tr[data-key="` + tenant + "/" + key + `"]`)
	return "document.querySelector(" + string(b) + ")"
}

// cell is the text of a held lock's cell of the given class.
func cell(t *testing.T, ctx context.Context, tenant, key, class string) string {
	t.Helper()
	return eval[string](t, ctx, `(() => { const r = `+row(tenant, key)+`; const c = r && r.querySelector("td.`+class+`"); return c ? c.textContent : ""; })()`)
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
