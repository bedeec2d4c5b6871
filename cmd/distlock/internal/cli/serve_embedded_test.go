package cli

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// TestServeEmbedded runs serve on its default store, an embedded etcd:
// the banner says where it listens and what to paste, a JSON Acquire as
// curl sends it takes a lock that a second Acquire cannot, Renew, Inspect
// and Release work, gRPC works over cleartext HTTP/2 on the same port,
// /healthz, /readyz and /metrics answer, and SIGTERM stops it with code 0.
func TestServeEmbedded(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	dir := filepath.Join(t.TempDir(), "state")
	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", dir)
	b := p.banner
	if !strings.HasPrefix(b.URL, "http://127.0.0.1:") || b.Auth != "off" || b.TLS != "off" ||
		!strings.Contains(b.Store, "embedded etcd in "+filepath.Join(dir, "etcd")) {
		t.Errorf("banner %+v", b)
	}
	wantCurl := `curl -sS -H 'Content-Type: application/json' -d '{"key":"demo","lease":"30s"}' ` + b.URL + "/distlock.v1.LockService/Acquire"
	if b.Curl != wantCurl {
		t.Errorf("curl line\n%s\nwant\n%s", b.Curl, wantCurl)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir %s: %v, mode %v; want 0700", dir, err, fi.Mode().Perm())
	}

	a := apiOf(p, "")
	got := mustOK(t, "Acquire", a.call(ctx, "Acquire", map[string]any{"key": "demo", "lease": "30s", "owner": "test"}))
	token, fence := got.str("token"), got.str("fence")
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(token) || fence == "" || fence == "0" {
		t.Fatalf("Acquire: token %q fence %q", token, fence)
	}
	wantCode(t, "a second Acquire", a.call(ctx, "Acquire", map[string]any{"key": "demo"}), "aborted")
	mustOK(t, "Renew", a.call(ctx, "Renew", map[string]any{"key": "demo", "token": token, "lease": "20s"}))
	in := mustOK(t, "Inspect", a.call(ctx, "Inspect", map[string]any{"key": "demo"}))
	lock, _ := in.body["lock"].(map[string]any)
	if lock["held"] != true || lock["owner"] != "test" || lock["fence"] != fence {
		t.Errorf("Inspect: %v; want held by test with fence %s", in.body, fence)
	}

	// gRPC on the same port, in cleartext HTTP/2.
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c := &http.Client{Transport: &http.Transport{Protocols: &protos}, Timeout: 30 * time.Second}
	defer h2c.CloseIdleConnections()
	grpc := distlockv1connect.NewLockServiceClient(h2c, b.URL, connect.WithGRPC())
	res, err := grpc.Inspect(ctx, connect.NewRequest(&distlockv1.InspectRequest{Key: "demo"}))
	if err != nil || !res.Msg.GetLock().GetHeld() {
		t.Errorf("gRPC Inspect: %v, %v", res, err)
	}

	mustOK(t, "Release", a.call(ctx, "Release", map[string]any{"key": "demo", "token": token}))
	wantCode(t, "Release again", a.call(ctx, "Release", map[string]any{"key": "demo", "token": token}), "not_found")

	hc := &http.Client{Timeout: 30 * time.Second}
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		if code, body := get(t, hc, b.URL+path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d %q", path, code, body)
		}
	}
	if b.Dashboard != b.URL+"/" {
		t.Errorf("banner dashboard %q, want %s/", b.Dashboard, b.URL)
	} else if code, body := get(t, hc, b.Dashboard); code != http.StatusOK || !strings.Contains(body, "Held locks") {
		t.Errorf("GET the dashboard: %d %q", code, body)
	}
	code, metrics := get(t, hc, b.Metrics)
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	for _, want := range []string{
		`distlock_acquisitions_total{backend="etcd",group="default",result="acquired"} 1`, // the client's telemetry
		`distlock_server_requests_total{code="ok",method="Acquire"} 1`,                    // the server's
		`etcd_server_has_leader 1`, // the embedded store's
		`go_goroutines`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}

	// A second service over the same data dir is refused, naming it.
	var stdout, stderr strings.Builder
	code = Main([]string{"serve", "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", dir}, strings.NewReader(""), &stdout, &stderr)
	if code != ExitUnavailable || !strings.Contains(stderr.String(), "in use by another process") || !strings.Contains(stderr.String(), dir) {
		t.Errorf("a second serve on %s: exit %d, stderr %q", dir, code, stderr.String())
	}

	if code := p.stop(); code != 0 {
		t.Errorf("exit code %d after SIGTERM; stderr:\n%s", code, p.stderr.String())
	}
}

// TestServeDefaultDataDir is $XDG_STATE_HOME/distlock, else
// ~/.local/state/distlock.
func TestServeDefaultDataDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/var/state")
	t.Setenv("HOME", "/home/u")
	if d, err := defaultDataDir(); err != nil || d != "/var/state/distlock" {
		t.Errorf("with XDG_STATE_HOME: %q, %v", d, err)
	}
	t.Setenv("XDG_STATE_HOME", "relative/is/ignored")
	if d, err := defaultDataDir(); err != nil || d != "/home/u/.local/state/distlock" {
		t.Errorf("without XDG_STATE_HOME: %q, %v", d, err)
	}
}

// TestServeRefusals refuses bad flags and files with exit code 2 and a
// message naming what is wrong (the line, for files), before any store or
// port is touched.
func TestServeRefusals(t *testing.T) {
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens", "# tenants\n0123456789abcdef0123 acme client\nshort acme client\n")
	policyFile := writeFile(t, dir, "policy.yaml", "default:\n  max_lease: 1m\n  max_lease_typo: 2m\n")
	missing := filepath.Join(dir, "missing")
	noTokens := writeFile(t, dir, "no-tokens", "# no token yet\n")
	emptyPolicy := writeFile(t, dir, "empty.yaml", "\n")
	strayPolicy := writeFile(t, dir, "stray.yaml", "groups:\n  - name: orders\n    prefixes: [orders/]\n    max_hold: 1m\n")
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"insecure on every interface", []string{"--insecure-no-auth", "--listen", "0.0.0.0:0"}, "loopback"},
		{"insecure on a host name", []string{"--insecure-no-auth", "--listen", "example.com:7070"}, "loopback"},
		{"insecure without a host", []string{"--insecure-no-auth", "--listen", ":7070"}, "loopback"},
		{"no auth at all", []string{"--listen", "127.0.0.1:0"}, "no --tokens"},
		{"tokens and insecure", []string{"--tokens", tokens, "--insecure-no-auth"}, "choose one"},
		{"bad tokens file", []string{"--tokens", tokens}, "tokens:3:"},
		{"missing tokens file", []string{"--tokens", missing}, "no such file"},
		{"tokens file without a token", []string{"--tokens", noTokens}, "has no token"},
		{"empty policy file", []string{"--insecure-no-auth", "--config", emptyPolicy}, "is empty"},
		{"bad policy", []string{"--insecure-no-auth", "--config", policyFile}, "line 3"},
		{"policy prefix no key has", []string{"--insecure-no-auth", "--config", strayPolicy}, "tenants/<tenant>/orders/"},
		{"cert without key", []string{"--insecure-no-auth", "--tls-cert", tokens}, "--tls-cert and --tls-key"},
		{"bad certificate", []string{"--insecure-no-auth", "--tls-cert", tokens, "--tls-key", tokens}, "tokens"},
		{"backend and data dir", []string{"--insecure-no-auth", "--backend", "redis://127.0.0.1:1", "--data-dir", dir}, "choose one"},
		{"the service as its own store", []string{"--insecure-no-auth", "--backend", "distlock://127.0.0.1:7070"}, "call itself"},
		{"bad listen", []string{"--insecure-no-auth", "--listen", "7070"}, "HOST:PORT"},
		{"default over max lease", []string{"--insecure-no-auth", "--default-lease", "2h"}, "--default-lease"},
		{"arguments", []string{"--insecure-no-auth", "extra"}, "unknown command"},
		{"bad log level", []string{"--insecure-no-auth", "--log-level", "loud"}, "--log-level"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := Main(append([]string{"serve"}, c.args...), strings.NewReader(""), &stdout, &stderr)
			if code != ExitUsage || !strings.Contains(stderr.String(), c.want) || !strings.HasPrefix(stderr.String(), "distlock: serve") && c.name != "arguments" {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), ExitUsage, c.want)
			}
			if stdout.Len() > 0 {
				t.Errorf("stdout %q", stdout.String())
			}
		})
	}
}

// TestServeListenBusy fails with exit code 1, naming the address, when the
// port is taken.
func TestServeListenBusy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stdout, stderr strings.Builder
	code := Main([]string{"serve", "--insecure-no-auth", "--listen", ln.Addr().String(), "--data-dir", t.TempDir()},
		strings.NewReader(""), &stdout, &stderr)
	if code != ExitError || !strings.Contains(stderr.String(), ln.Addr().String()) {
		t.Errorf("exit %d, stderr %q; want %d naming %s", code, stderr.String(), ExitError, ln.Addr())
	}
}
