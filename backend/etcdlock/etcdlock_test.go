package etcdlock_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// servers are the etcd deployments every test runs against: Debian's
// etcd-server process. (The lock service's embedded etcd runs the suite in
// the service's own module, which keeps the etcd server out of this one.)
var servers = []struct {
	name  string
	start func(testing.TB) []string
}{
	{"debian", func(t testing.TB) []string { return []string{testserver.EtcdEndpoint(testserver.Etcd(t))} }},
}

var seq atomic.Int64

// uniquePrefix returns a namespace of its own for one test.
func uniquePrefix(t testing.TB) string {
	return fmt.Sprintf("test-%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), seq.Add(1))
}

func dial(t testing.TB, eps []string, prefix string, opts ...etcdlock.Option) *etcdlock.Backend {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := etcdlock.Dial(ctx, clientv3.Config{Endpoints: eps}, append([]etcdlock.Option{etcdlock.WithPrefix(prefix)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storeEnv is a namespace of its own on a real etcd server, for one test.
type storeEnv struct {
	eps    []string
	cli    *clientv3.Client // a plain client, to look behind the backends
	prefix string
	ctx    context.Context // ends a minute after newStoreEnv
}

func newStoreEnv(t *testing.T) storeEnv {
	eps := []string{testserver.EtcdEndpoint(testserver.Etcd(t))}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return storeEnv{eps: eps, cli: admin(t, eps), prefix: uniquePrefix(t), ctx: ctx}
}

// client returns a client of a backend of its own in the namespace, closed
// when t ends.
func (e storeEnv) client(t *testing.T, opts ...etcdlock.Option) *distlock.Client {
	c := distlock.New(dial(t, e.eps, e.prefix, opts...))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// admin returns a plain client for looking at the store behind the backend.
func admin(t testing.TB, eps []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// layoutOf returns the key layout that the namespace prefix records, or
// the escaped one if it records none (yet).
func layoutOf(t testing.TB, cli *clientv3.Client, prefix string) etcdlock.KeyLayout {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+".layout")
	switch {
	case err != nil:
		t.Fatalf("read the layout of %q: %v", prefix, err)
	case len(resp.Kvs) == 0:
		return etcdlock.KeyLayoutEscaped
	}
	return etcdlock.KeyLayout(resp.Kvs[0].Value)
}

// entries returns the queue entries of key, oldest first.
func entries(t testing.TB, cli *clientv3.Client, prefix, key string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, etcdlock.Dir(prefix, layoutOf(t, cli, prefix), key), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatalf("read queue of %q: %v", key, err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// deleteEntries deletes the given queue entries.
func deleteEntries(t testing.TB, cli *clientv3.Client, q []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, e := range q {
		if _, err := cli.Delete(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
}

// TestConformance runs the suite on backends as they come; on linked
// queues (WithLinkedQueue), where every other backend is one without the
// option, as a prefix shared by both is; and in a namespace of the ordered
// layout, where every other backend follows the namespace's record rather
// than being given the layout.
func TestConformance(t *testing.T) {
	for _, srv := range servers {
		for _, mode := range []string{"", "linked", "ordered"} {
			t.Run(strings.TrimSuffix(srv.name+"/"+mode, "/"), func(t *testing.T) { conformance(t, srv.start(t), mode) })
		}
	}
}

func conformance(t *testing.T, eps []string, mode string) {
	cli := admin(t, eps)
	prefix := uniquePrefix(t)
	u, err := url.Parse(eps[0])
	if err != nil {
		t.Fatal(err)
	}
	var given etcdlock.Option
	switch mode {
	case "linked":
		given = etcdlock.WithLinkedQueue()
	case "ordered":
		given = etcdlock.WithKeyLayout(etcdlock.KeyLayoutOrdered)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		first := dial(t, eps, prefix, given)
		l, err := first.KeyLayout(ctx)
		_ = first.Close()
		if err != nil || l != etcdlock.KeyLayoutOrdered {
			t.Fatalf("recording the ordered layout: %q, %v", l, err)
		}
	}
	var made atomic.Int64
	opts := func() []etcdlock.Option {
		if given != nil && made.Add(1)%2 == 1 {
			return []etcdlock.Option{given}
		}
		return nil
	}
	locktest.Run(t, locktest.Harness{
		NewBackend: func(t testing.TB) driver.Backend { return dial(t, eps, prefix, opts()...) },
		StoreAddr:  u.Host,
		// Short request timeouts, so that a cut link fails calls soon.
		NewBackendAt: func(t testing.TB, addr string) driver.Backend {
			return dial(t, []string{"http://" + addr}, prefix, append(opts(), etcdlock.WithRequestTimeout(time.Second))...)
		},
		DeleteKey: func(t testing.TB, key string) {
			q := entries(t, cli, prefix, key)
			if len(q) == 0 {
				t.Fatalf("no entry for %q to delete", key)
			}
			deleteEntries(t, cli, q[:1])
		},
		DeleteWaiters: func(t testing.TB, key string) {
			if q := entries(t, cli, prefix, key); len(q) > 1 {
				deleteEntries(t, cli, q[1:]) // all but the holder, the lowest create revision
			}
		},
		// A handoff is the release's Raft write (an fsync on the
		// Debian server) plus a watch event; on a loaded machine that
		// alone can pass the default 50ms.
		NotifyLatency: 150 * time.Millisecond,
	})
}
