package cli

import (
	"bytes"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestServeInsecureLoopbackHostsOnly plays DNS rebinding against a service
// without auth: a page on attacker.example whose name now resolves to
// 127.0.0.1 sends requests that carry its own name in Host. The service
// must answer only requests addressed to a loopback name, on every route
// (the API, the dashboard, the metrics), and a refusal must not echo the
// Host it refused.
func TestServeInsecureLoopbackHostsOnly(t *testing.T) {
	dir := t.TempDir()
	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "state"))
	hc := &http.Client{Timeout: 10 * time.Second}
	port := p.banner.Listen[strings.LastIndex(p.banner.Listen, ":"):]
	send := func(method, path, host, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, p.banner.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return resp.StatusCode, string(data)
	}
	forceRelease := `{"tenant":"default","key":"jobs/nightly","reason":"rebound"}`
	for _, host := range []string{"attacker.example" + port, "attacker.example", "127.0.0.1.attacker.example" + port, "10.0.0.7" + port} {
		for _, c := range []struct{ method, path, body string }{
			{http.MethodPost, "/distlock.v1.LockService/ForceRelease", forceRelease},
			{http.MethodPost, "/distlock.v1.LockService/List", `{}`},
			{http.MethodGet, "/", ""},
			{http.MethodGet, "/metrics", ""},
		} {
			code, body := send(c.method, c.path, host, c.body)
			if code != http.StatusMisdirectedRequest {
				t.Errorf("%s %s with Host %q: HTTP %d, want 421", c.method, c.path, host, code)
			}
			if strings.Contains(body, "attacker") {
				i := strings.Index(body, "attacker")
				t.Errorf("%s %s with Host %q: the answer echoes the Host: …%s…", c.method, c.path, host, body[max(0, i-40):min(len(body), i+40)])
			}
		}
	}
	for _, host := range []string{"127.0.0.1" + port, "localhost" + port, "LOCALHOST" + port, "[::1]" + port} {
		if code, body := send(http.MethodPost, "/distlock.v1.LockService/List", host, `{}`); code != http.StatusOK {
			t.Errorf("List with Host %q: HTTP %d %q, want 200", host, code, body)
		}
	}
	if code, body := send(http.MethodGet, "/", "127.0.0.1"+port, ""); code != http.StatusOK || !bytes.Contains([]byte(body), []byte("127.0.0.1"+port)) {
		t.Errorf("the dashboard at 127.0.0.1: HTTP %d, or its curl line does not name the service's address", code)
	}
	if code := p.stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
}
