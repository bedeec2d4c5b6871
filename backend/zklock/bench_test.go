package zklock_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkLockRelease compares Lock+Release through distlock.Client with
// ZooKeeper's floor, in alternating rounds: create an ephemeral sequential
// node, then delete it; and that floor plus the listing of the queue, which a
// queue lock needs unless it learns its place otherwise. "serial" measures
// latency and "parallel" throughput, each goroutine on a key of its own;
// floor/distlock is distlock's throughput relative to the floor's.
func BenchmarkLockRelease(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	root := uniqueRoot(b)
	c := distlock.New(dial(b, srv.Addr(), root))
	b.Cleanup(func() { _ = c.Close() })
	conn := admin(b, srv.Addr())
	for i := range 64 { // the floors' parents exist before the timed calls
		p := fmt.Sprintf("%s/floor-bench-%d", root, i)
		if _, err := conn.Create(p, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			b.Fatal(err)
		}
	}
	floor := locktest.Op{Name: "floor", Do: func(_ context.Context, key string) error {
		node, err := conn.Create(root+"/floor-"+key+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			return err
		}
		return conn.Delete(node, -1)
	}}
	floorList := locktest.Op{Name: "floor+list", Do: func(_ context.Context, key string) error {
		parent := root + "/floor-" + key
		node, err := conn.Create(parent+"/lock-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err != nil {
			return err
		}
		if _, _, err := conn.Children(parent); err != nil {
			return err
		}
		return conn.Delete(node, -1)
	}}
	lock := locktest.Op{Name: "distlock", Do: func(ctx context.Context, key string) error {
		l, err := c.Lock(ctx, key)
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}}
	for _, mode := range []string{"serial", "parallel"} {
		b.Run(mode, func(b *testing.B) { locktest.Compare(b, mode, floor, floorList, lock) })
	}
}

// BenchmarkContended runs 16 goroutines on 4 sessions against one key.
func BenchmarkContended(b *testing.B) {
	const lockers, conns = 16, 4
	srv := testserver.ZooKeeper(b)
	root := uniqueRoot(b)
	cs := make([]*distlock.Client, conns)
	for i := range cs {
		cs[i] = distlock.New(dial(b, srv.Addr(), root))
		b.Cleanup(func() { _ = cs[i].Close() })
	}
	locktest.Contend(b, lockers, func(ctx context.Context, i int) (func() error, error) {
		l, err := cs[i%conns].Lock(ctx, "contended")
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(ctx) }, nil
	})
}
