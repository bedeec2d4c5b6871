package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/cmd/distlock/internal/embedetcd"
	"github.com/distlock/distlock/driver"
)

// TestServeEmbeddedKeyLayout starts serve on an embedded store in which a
// lock is held in the escaped key layout, as an earlier release kept it:
// serve warns, keeps that layout, and honours the lock. Once no lock is
// held, the next start moves the store to the ordered layout.
func TestServeEmbeddedKeyLayout(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	dir := filepath.Join(t.TempDir(), "state")
	const key = "earlier"
	var token string
	withStore(t, ctx, dir, func(cli *clientv3.Client) {
		b, err := etcdlock.New(cli, etcdlock.WithKeyLayout(etcdlock.KeyLayoutEscaped))
		if err != nil {
			t.Fatal(err)
		}
		token = strings.Repeat("e", 32)
		if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "tenants/default/" + key, Token: token, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		_ = b.Close() // the lock stays, as a running holder's would
	})

	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", dir)
	a := apiOf(p, "")
	wantCode(t, "Acquire of the key held in the escaped layout", a.call(ctx, "Acquire", map[string]any{"key": key}), "aborted")
	mustOK(t, "Acquire of another key", a.call(ctx, "Acquire", map[string]any{"key": "other", "lease": "2s"}))
	if code := p.stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(p.stderr.String(), `"level":"WARN","msg":"the embedded store holds locks in the key layout of an earlier release`) {
		t.Errorf("no warning of the escaped layout:\n%s", p.stderr.String())
	}

	withStore(t, ctx, dir, func(cli *clientv3.Client) {
		if l := recordedLayout(t, ctx, cli); l != "escaped" {
			t.Fatalf("the store records %q while a lock is held, want escaped", l)
		}
		if _, err := cli.Delete(ctx, "distlock/", clientv3.WithPrefix()); err != nil { // every lock ends
			t.Fatal(err)
		}
	})
	p = startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", dir)
	mustOK(t, "Acquire", apiOf(p, "").call(ctx, "Acquire", map[string]any{"key": key, "lease": "30s"}))
	if code := p.stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if strings.Contains(p.stderr.String(), "key layout of an earlier release") {
		t.Errorf("a warning of the escaped layout after the move:\n%s", p.stderr.String())
	}
	withStore(t, ctx, dir, func(cli *clientv3.Client) {
		if l := recordedLayout(t, ctx, cli); l != "ordered" {
			t.Fatalf("the store records %q after a start without locks, want ordered", l)
		}
	})
}

// withStore starts the embedded store in dir as serve does, and runs f
// with a client of it.
func withStore(t *testing.T, ctx context.Context, dir string, f func(*clientv3.Client)) {
	t.Helper()
	e, err := embedetcd.Start(ctx, filepath.Join(dir, "etcd"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	f(cli)
}

// recordedLayout returns the key layout the store records for serve's
// namespace, etcdlock's default.
func recordedLayout(t *testing.T, ctx context.Context, cli *clientv3.Client) string {
	t.Helper()
	resp, err := cli.Get(ctx, etcdlock.DefaultPrefix+".layout")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}
