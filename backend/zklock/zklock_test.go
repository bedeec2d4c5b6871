package zklock_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testserver.WithShared(m)) }

// zkServer returns the ZooKeeper server the package's tests share: none of
// them stops it, and each keeps to a root node of its own.
func zkServer(t testing.TB) *testserver.Server {
	return testserver.Shared(t, "zookeeper", testserver.ZooKeeper)
}

var seq atomic.Int64

// uniqueRoot returns a root node of its own for one test.
func uniqueRoot(t testing.TB) string {
	return fmt.Sprintf("/test-%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), seq.Add(1))
}

func dial(t testing.TB, addr, root string, opts ...zklock.Option) *zklock.Backend {
	t.Helper()
	// A server that just started may take seconds on a busy machine before
	// it serves sessions.
	base := []zklock.Option{zklock.WithRoot(root), zklock.WithSessionTimeout(4 * time.Second), zklock.WithDialTimeout(30 * time.Second)}
	b, err := zklock.Dial(context.Background(), []string{addr}, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// admin returns a plain session for looking at the store behind the backend.
func admin(t testing.TB, addr string) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect([]string{addr}, 4*time.Second, zk.WithLogger(quiet{}))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for range events { // drained until Close closes it
		}
	}()
	t.Cleanup(conn.Close)
	return conn
}

func parentOf(root, key string) string {
	return root + "/" + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// queue returns the children of key's parent, by sequence.
func queue(t testing.TB, conn *zk.Conn, root, key string) []string {
	t.Helper()
	children, _, err := conn.Children(parentOf(root, key))
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatalf("list queue of %q: %v", key, err)
	}
	return bySequence(children)
}

func bySequence(children []string) []string {
	slices.SortFunc(children, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	return children
}

// awaitQueue waits, with watches, until key's queue (by sequence) satisfies
// cond, for up to 10s, and returns it.
func awaitQueue(t testing.TB, conn *zk.Conn, root, key, what string, cond func(q []string) bool) []string {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		q, changed := watchQueue(t, conn, parentOf(root, key))
		if cond(q) {
			return q
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%s: not within 10s; queue %q", what, q)
		}
	}
}

// watchQueue lists a queue and returns a channel that fires when it
// changes, or when the missing parent is created.
func watchQueue(t testing.TB, conn *zk.Conn, parent string) ([]string, <-chan zk.Event) {
	t.Helper()
	for {
		children, _, ch, err := conn.ChildrenW(parent)
		if err == nil {
			return bySequence(children), ch
		}
		if err != zk.ErrNoNode {
			t.Fatalf("watch queue %s: %v", parent, err)
		}
		exists, _, ch, err := conn.ExistsW(parent)
		if err != nil {
			t.Fatalf("watch parent %s: %v", parent, err)
		}
		if !exists {
			return nil, ch
		}
	}
}

// queueLen is a condition for awaitQueue.
func queueLen(n int) func([]string) bool { return func(q []string) bool { return len(q) == n } }

func TestConformance(t *testing.T) {
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	locktest.Run(t, locktest.Harness{
		NewBackend:   func(t testing.TB) driver.Backend { return dial(t, srv.Addr(), root) },
		StoreAddr:    srv.Addr(),
		NewBackendAt: func(t testing.TB, addr string) driver.Backend { return dial(t, addr, root) },
		DeleteKey: func(t testing.TB, key string) {
			q := queue(t, conn, root, key)
			if len(q) == 0 {
				t.Fatalf("no node for %q to delete", key)
			}
			if err := conn.Delete(parentOf(root, key)+"/"+q[0], -1); err != nil {
				t.Fatal(err)
			}
		},
		DeleteWaiters: func(t testing.TB, key string) { deleteWaiters(t, conn, root, key) },
	})
}

// deleteWaiters deletes every node of key's queue but the holder's.
func deleteWaiters(t testing.TB, conn *zk.Conn, root, key string) {
	t.Helper()
	q := queue(t, conn, root, key)
	for _, n := range q[min(1, len(q)):] {
		if err := conn.Delete(parentOf(root, key)+"/"+n, -1); err != nil && err != zk.ErrNoNode {
			t.Fatalf("delete waiter %s: %v", n, err)
		}
	}
}
