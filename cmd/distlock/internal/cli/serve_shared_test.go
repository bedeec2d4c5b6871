package cli

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
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

// TestServeRoutes runs two services over one Redis, both with a route that
// keeps a key prefix in an etcd of its own, as a deployment splits its keys
// over two stores: a key under the prefix is held in the etcd and nowhere
// else, and the other service sees it there; a key outside it stays in
// Redis; List shows both.
func TestServeRoutes(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	redisURL := "redis://" + testserver.Redis(t).Addr()
	etcdURL := "etcd://" + testserver.Etcd(t).Addr()
	args := []string{"--insecure-no-auth", "--listen", "127.0.0.1:0", "--backend", redisURL,
		"--route", "tenants/default/routed/=" + etcdURL}
	one, two := startServe(t, nil, args...), startServe(t, nil, args...)
	if want := redisURL + "; tenants/default/routed/ in " + etcdURL; one.banner.Store != want {
		t.Errorf("banner store %q, want %q", one.banner.Store, want)
	}
	a, b := apiOf(one, ""), apiOf(two, "")
	mustOK(t, "Acquire routed/k through one", a.call(ctx, "Acquire", map[string]any{"key": "routed/k", "lease": "30s"}))
	mustOK(t, "Acquire plain through one", a.call(ctx, "Acquire", map[string]any{"key": "plain", "lease": "30s"}))
	wantCode(t, "Acquire routed/k through two", b.call(ctx, "Acquire", map[string]any{"key": "routed/k"}), "aborted")

	for u, want := range map[string][2]bool{redisURL: {false, true}, etcdURL: {true, false}} {
		c, err := distlock.Open(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		for i, k := range []string{"tenants/default/routed/k", "tenants/default/plain"} {
			if info, err := c.Inspect(ctx, k); err != nil || info.Held != want[i] {
				t.Errorf("%s in %s: held %v (%v), want %v", k, u, info.Held, err, want[i])
			}
		}
		_ = c.Close()
	}
	listed := mustOK(t, "List through two", b.call(ctx, "List", map[string]any{}))
	var keys []string
	for _, l := range listed.body["locks"].([]any) {
		keys = append(keys, l.(map[string]any)["key"].(string))
	}
	if !slices.Equal(keys, []string{"plain", "routed/k"}) {
		t.Errorf("List through two = %q, want plain and routed/k", keys)
	}
	for _, p := range []*serveProc{one, two} {
		if code := p.stop(); code != 0 {
			t.Errorf("exit %d; stderr:\n%s", code, p.stderr.String())
		}
	}
}

// TestServeRouteFlags refuses bad --route flags with exit code 2.
func TestServeRouteFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--route", "tenants/a/"}, "want PREFIX=URL"},
		{[]string{"--route", "=redis://127.0.0.1:1"}, "want PREFIX=URL"},
		{[]string{"--route", "orders/=redis://127.0.0.1:1"}, "matches no key of the service"},
		{[]string{"--route", "tenants/a/=redis://127.0.0.1:1", "--route", "tenants/a/=redis://127.0.0.1:2"}, "given twice"},
		{[]string{"--route", "tenants/acme=redis://127.0.0.1:1"}, "end the tenant with a slash (tenants/acme/)"},
		{[]string{"--route", "sessions/acme=redis://127.0.0.1:1"}, "end the tenant with a slash"},
		{[]string{"--route", "tenants/a/=distlock://127.0.0.1:7070"}, "cannot be a distlock:// service"},
	} {
		var stdout, stderr strings.Builder
		code := Main(append([]string{"serve", "--insecure-no-auth"}, c.args...), strings.NewReader(""), &stdout, &stderr)
		if code != ExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", c.args, code, stderr.String(), ExitUsage, c.want)
		}
	}
}
