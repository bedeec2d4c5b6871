package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Tokens of the reload tests: long enough for a token file.
const (
	tokenA      = "token-a-0123456789abcdef"
	tokenB      = "token-b-0123456789abcdef"
	tokenViewer = "token-v-0123456789abcdef"
	tokenOther  = "token-o-0123456789abcdef"
)

// TestServeTokens serves with a token file: a call without a token or with
// an unknown one is UNAUTHENTICATED, a viewer may not Acquire, another
// tenant does not see the key; a changed file takes effect within seconds
// (a new token works, a removed one no longer does), and a broken one is
// refused, its line named in the log, while the tokens in force stay.
func TestServeTokens(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	dir := t.TempDir()
	tokens := writeFile(t, dir, "tokens", "# token tenant role\n"+
		tokenA+" acme client\n"+tokenViewer+" acme viewer\n"+tokenOther+" other client\n")
	p := startServe(t, nil, "--tokens", tokens, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "state"))
	if b := p.banner; b.Auth != "tokens" || b.Tokens != 3 ||
		b.Curl != `curl -sS -H 'Content-Type: application/json' -H "Authorization: Bearer $TOKEN" -d '{"key":"demo","lease":"30s"}' `+b.URL+"/distlock.v1.LockService/Acquire" {
		t.Errorf("banner %+v", b)
	}
	acquire := map[string]any{"key": "k", "lease": "30s"}
	wantCode(t, "no token", apiOf(p, "").call(ctx, "Acquire", acquire), "unauthenticated")
	wantCode(t, "unknown token", apiOf(p, tokenB).call(ctx, "Acquire", acquire), "unauthenticated")
	wantCode(t, "viewer", apiOf(p, tokenViewer).call(ctx, "Acquire", acquire), "permission_denied")
	got := mustOK(t, "client", apiOf(p, tokenA).call(ctx, "Acquire", acquire))
	in := mustOK(t, "other tenant's Inspect", apiOf(p, tokenOther).call(ctx, "Inspect", map[string]any{"key": "k"}))
	if lock, _ := in.body["lock"].(map[string]any); lock["held"] == true {
		t.Errorf("another tenant sees acme's lock: %v", in.body)
	}

	// Token A is replaced by token B: the file is polled.
	writeFile(t, dir, "tokens", tokenB+" acme client\n"+tokenViewer+" acme viewer\n")
	if !waitFor(10*time.Second, func() bool {
		return apiOf(p, tokenB).call(ctx, "Inspect", map[string]any{"key": "k"}).code == ""
	}) {
		t.Fatalf("token B not accepted 10s after the file changed; stderr:\n%s", p.stderr.String())
	}
	wantCode(t, "removed token", apiOf(p, tokenA).call(ctx, "Inspect", map[string]any{"key": "k"}), "unauthenticated")
	mustOK(t, "Release with token B", apiOf(p, tokenB).call(ctx, "Release", map[string]any{"key": "k", "token": got.str("token")}))

	// A broken file is refused, naming its line; token B stays.
	writeFile(t, dir, "tokens", tokenB+" acme client\n"+tokenA+" acme\n")
	if !p.waitLog(10*time.Second, "reload refused", tokens+":2:") {
		t.Fatalf("no refusal naming line 2 in the log:\n%s", p.stderr.String())
	}
	mustOK(t, "token B after a broken file", apiOf(p, tokenB).call(ctx, "Inspect", map[string]any{"key": "k"}))
	wantCode(t, "token A of the broken file", apiOf(p, tokenA).call(ctx, "Inspect", map[string]any{"key": "k"}), "unauthenticated")
	if code := p.stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// TestServePolicyReload serves with a policy file: SIGHUP with a broken
// file keeps the policy in force and logs the line at fault; a valid change
// is picked up by polling (max_lease lowered: a longer lease is now
// INVALID_ARGUMENT); and SIGHUP applies a change that polling cannot see
// (same size and modification time).
func TestServePolicyReload(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	dir := t.TempDir()
	policyFile := writeFile(t, dir, "policy.yaml", "default:\n  max_lease: 60s\n")
	fi, err := os.Stat(policyFile)
	if err != nil {
		t.Fatal(err)
	}
	// rewrite writes content, of the same size as the first, with the
	// first's modification time: only SIGHUP can tell it changed.
	rewrite := func(content string) {
		t.Helper()
		if int64(len(content)) != fi.Size() {
			t.Fatalf("%q is not %d bytes", content, fi.Size())
		}
		writeFile(t, dir, "policy.yaml", content)
		if err := os.Chtimes(policyFile, fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
	}
	p := startServe(t, nil, "--insecure-no-auth", "--config", policyFile, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "state"))
	if p.banner.Policy != policyFile {
		t.Errorf("banner %+v", p.banner)
	}
	a := apiOf(p, "")
	acquire := func(key, lease string) reply {
		return a.call(ctx, "Acquire", map[string]any{"key": key, "lease": lease})
	}
	mustOK(t, "lease 30s under max_lease 60s", acquire("a", "30s"))
	wantCode(t, "lease 90s over max_lease 60s", acquire("b", "90s"), "invalid_argument")

	rewrite("default:\n  max_lease: 6Os\n") // a letter O for a zero
	p.signal(syscall.SIGHUP)
	if !p.waitLog(10*time.Second, "SIGHUP: reloading files", "reload refused", "line 2") {
		t.Fatalf("no refusal naming line 2 in the log:\n%s", p.stderr.String())
	}
	mustOK(t, "lease 30s after a broken file", acquire("c", "30s"))

	writeFile(t, dir, "policy.yaml", "default:\n  lease: 5s\n  max_lease: 10s\n")
	n := 0
	if !waitFor(10*time.Second, func() bool {
		n++
		return acquire(fmt.Sprintf("d%d", n), "30s").code == "invalid_argument"
	}) {
		t.Fatalf("max_lease 10s not in force 10s after the file changed; stderr:\n%s", p.stderr.String())
	}
	mustOK(t, "lease 5s under max_lease 10s", acquire("e", "5s"))
	if fi, err = os.Stat(policyFile); err != nil {
		t.Fatal(err)
	}

	rewrite("default:\n  lease: 5s\n  max_lease: 99s\n")
	p.signal(syscall.SIGHUP)
	if !waitFor(10*time.Second, func() bool {
		n++
		return acquire(fmt.Sprintf("f%d", n), "90s").code == ""
	}) {
		t.Fatalf("max_lease 99s not in force 10s after SIGHUP; stderr:\n%s", p.stderr.String())
	}
	if code := p.stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// TestServePolicyLease serves with a policy whose groups set a lease: an
// Acquire that names none gets its group's lease (not the service's own
// default, which max_lease would refuse), and one that names a lease keeps
// it.
func TestServePolicyLease(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	dir := t.TempDir()
	policyFile := writeFile(t, dir, "policy.yaml", `default:
  lease: 10s
  max_lease: 10s
groups:
  - name: payments
    prefixes: [tenants/default/payments/]
    lease: 2s
    max_lease: 3s
`)
	p := startServe(t, nil, "--insecure-no-auth", "--config", policyFile, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "state"))
	a := apiOf(p, "")
	for _, c := range []struct{ key, lease, want string }{
		{"payments/1", "", "2s"},
		{"reports/1", "", "10s"},
		{"payments/2", "3s", "3s"},
	} {
		req := map[string]any{"key": c.key}
		if c.lease != "" {
			req["lease"] = c.lease
		}
		r := a.call(ctx, "Acquire", req)
		mustOK(t, "Acquire "+c.key, r)
		if got := r.body["lease"]; got != c.want {
			t.Errorf("Acquire %s with lease %q: lease %v, want %s", c.key, c.lease, got, c.want)
		}
	}
	if code := p.stop(); code != 0 {
		t.Errorf("exit %d", code)
	}
}
