package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testserver"
)

// TestServeHidesSecrets gives serve store URLs whose passwords sit in
// every place one can (the user information, a query parameter, a
// key=value connection string) and checks that none is printed: not in a
// refusal, not in the banner, not in the log.
func TestServeHidesSecrets(t *testing.T) {
	for _, backend := range []string{
		"redis://:Secret-userinfo@127.0.0.1:1/0",
		"redis://127.0.0.1:1/0?password=Secret-query",
		"host=127.0.0.1 port=1 password=Secret-keyvalue",
		"postgres://app:p%zzSecret-unparsed@127.0.0.1:1/app",
	} {
		out, _ := serveRefused(backend)
		if strings.Contains(string(out), "Secret") {
			t.Errorf("serve --backend %q printed the password:\n%s", backend, out)
		}
	}

	pg := testserver.Postgres(t) // trusts every password: serve starts
	backend := "postgres://postgres@" + pg.Addr() + "/postgres?sslmode=disable&password=Secret-served"
	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--backend", backend)
	if strings.Contains(p.banner.Store, "Secret") || strings.Contains(p.banner.Curl, "Secret") {
		t.Errorf("the banner shows the password: %+v", p.banner)
	}
	if !p.waitLog(10*time.Second, `"serving"`) {
		t.Fatalf("no serving line:\n%s", p.stderr.String())
	}
	if code := p.stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
	if strings.Contains(p.stderr.String(), "Secret") {
		t.Errorf("the log shows the password:\n%s", p.stderr.String())
	}
	if strings.Contains(p.stderr.String(), "FNV-1a") {
		t.Errorf("a new database, on SHA-256 ids, was warned of:\n%s", p.stderr.String())
	}
}

// TestServeWarnsOfFNVKeyIDs: over a PostgreSQL database whose lock ids are
// FNV-1a (one an older version used), which a caller can collide, serve
// says so at start.
func TestServeWarnsOfFNVKeyIDs(t *testing.T) {
	pg := testserver.Postgres(t)
	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--backend", testserver.PostgresDSN(pg)+"&key_ids=fnv1a")
	if !p.waitLog(10*time.Second, `"serving"`) {
		t.Fatalf("no serving line:\n%s", p.stderr.String())
	}
	if code := p.stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
	if !strings.Contains(p.stderr.String(), `"level":"WARN","msg":"this PostgreSQL database maps keys to lock ids with FNV-1a`) {
		t.Errorf("no warning of the FNV-1a ids in the log:\n%s", p.stderr.String())
	}
}

// TestServeUnreachableStoreExits: serve over a store it cannot reach exits
// 69 at start, naming the store, whatever the store (a PostgreSQL pool
// connects lazily, and served, failing every call, until this test).
func TestServeUnreachableStoreExits(t *testing.T) {
	for _, backend := range []string{
		"postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2",
		"redis://127.0.0.1:1/0",
	} {
		out, err := serveRefused(backend)
		if code := exitCode(err); code != ExitUnavailable || !strings.Contains(string(out), "127.0.0.1:1") {
			t.Errorf("serve --backend %q: exit %d, want %d naming the store; output:\n%s", backend, code, ExitUnavailable, out)
		}
	}
}

// serveRefused runs serve without auth over backend, which it should
// refuse, and returns its output and exit; a serve that serves instead is
// killed after a minute.
func serveRefused(backend string) ([]byte, error) {
	cmd := serveCommandLine(nil, "serve", "--insecure-no-auth", "--listen", "127.0.0.1:0", "--backend", backend)
	stop := time.AfterFunc(time.Minute, func() { _ = cmd.Process.Kill() })
	defer stop.Stop()
	return cmd.CombinedOutput()
}
