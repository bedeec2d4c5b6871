package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testserver"
)

// TestServeSharedStore runs two services over one shared store, as a
// deployment scales: a lock taken through one is refused (ABORTED) through
// the other, which can renew and release it with its token, and then take
// the key itself.
func TestServeSharedStore(t *testing.T) {
	for _, c := range []struct {
		name    string
		backend func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string { return "redis://" + testserver.Redis(t).Addr() }},
		{"etcd cluster", func(t *testing.T) string {
			var addrs []string
			for _, m := range testserver.EtcdCluster(t, 3) {
				addrs = append(addrs, m.Addr())
			}
			return "etcd://" + strings.Join(addrs, ",")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := testCtx(t, 3*time.Minute)
			backend := c.backend(t)
			args := []string{"--insecure-no-auth", "--listen", "127.0.0.1:0"}
			// One gets the store from --backend, the other from the environment.
			one := startServe(t, nil, append(args, "--backend", backend)...)
			two := startServe(t, []string{"DISTLOCK_BACKEND=" + backend}, args...)
			for _, p := range []*serveProc{one, two} {
				if p.banner.Store != backend {
					t.Errorf("banner store %q, want %q", p.banner.Store, backend)
				}
			}
			a, b := apiOf(one, ""), apiOf(two, "")
			got := mustOK(t, "Acquire through one", a.call(ctx, "Acquire", map[string]any{"key": "shared", "lease": "30s", "owner": "one"}))
			token := got.str("token")
			wantCode(t, "Acquire through two", b.call(ctx, "Acquire", map[string]any{"key": "shared", "lease": "30s"}), "aborted")
			in := mustOK(t, "Inspect through two", b.call(ctx, "Inspect", map[string]any{"key": "shared"}))
			if lock, _ := in.body["lock"].(map[string]any); lock["held"] != true || lock["owner"] != "one" || lock["fence"] != got.str("fence") {
				t.Errorf("Inspect through two: %v", in.body)
			}
			mustOK(t, "Renew through two", b.call(ctx, "Renew", map[string]any{"key": "shared", "token": token, "lease": "20s"}))
			mustOK(t, "Release through two", b.call(ctx, "Release", map[string]any{"key": "shared", "token": token}))
			next := mustOK(t, "Acquire through two after the release", b.call(ctx, "Acquire", map[string]any{"key": "shared", "lease": "30s"}))
			wantCode(t, "Acquire through one", a.call(ctx, "Acquire", map[string]any{"key": "shared"}), "aborted")
			t.Logf("over %s: fences %s then %s", backend, got.str("fence"), next.str("fence"))
			if next.str("fence") == got.str("fence") {
				t.Errorf("the second grant has the first's fence %s", got.str("fence"))
			}
			for _, p := range []*serveProc{one, two} {
				if code := p.stop(); code != 0 {
					t.Errorf("exit %d; stderr:\n%s", code, p.stderr.String())
				}
			}
		})
	}
}
