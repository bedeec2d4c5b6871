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

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var seq atomic.Int64

// uniqueRoot returns a root node of its own for one test.
func uniqueRoot(t testing.TB) string {
	return fmt.Sprintf("/test-%s-%d-%d", strings.ReplaceAll(t.Name(), "/", "."), time.Now().UnixNano(), seq.Add(1))
}

func dial(t testing.TB, addr, root string, opts ...zklock.Option) *zklock.Backend {
	t.Helper()
	// A server that just started may take seconds on a busy machine before
	// it serves sessions.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := zklock.Dial(ctx, []string{addr}, append([]zklock.Option{zklock.WithRoot(root), zklock.WithSessionTimeout(4 * time.Second)}, opts...)...)
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
	slices.SortFunc(children, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	return children
}

func TestConformance(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	locktest.Run(t, locktest.Harness{
		NewBackend: func(t testing.TB) driver.Backend { return dial(t, srv.Addr(), root) },
		DeleteKey: func(t testing.TB, key string) {
			q := queue(t, conn, root, key)
			if len(q) == 0 {
				t.Fatalf("no node for %q to delete", key)
			}
			if err := conn.Delete(parentOf(root, key)+"/"+q[0], -1); err != nil {
				t.Fatal(err)
			}
		},
		Iterations: 50,
	})
}
