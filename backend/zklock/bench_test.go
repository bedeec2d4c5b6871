package zklock_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

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

// BenchmarkContendedVsNewLock compares distlock with go-zookeeper's
// zk.NewLock on one key, 16 goroutines in all, in the session layouts users
// run: 4 sessions of 4 goroutines and 1 session of 16, with no work and with
// 1 ms of work outside the lock. Each session is a replica: a distlock.Client
// over its own backend, or a zk.Conn whose goroutines each have a zk.Lock.
// distlock locks with WithLease(30s) (no watchdog). The two take turns in
// rounds of 256 acquisitions, so load on the machine hits both;
// "newlock/distlock" is distlock's throughput relative to zk.NewLock's.
func BenchmarkContendedVsNewLock(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	for _, layout := range []struct{ sessions, perSession int }{{4, 4}, {1, 16}} {
		for _, think := range []time.Duration{0, time.Millisecond} {
			name := fmt.Sprintf("%dx%d/think=%v", layout.sessions, layout.perSession, think)
			b.Run(name, func(b *testing.B) {
				root := uniqueRoot(b)
				lockers := layout.sessions * layout.perSession
				cs := make([]*distlock.Client, layout.sessions)
				locks := make([]*zk.Lock, lockers)
				for i := range cs {
					cs[i] = distlock.New(dial(b, srv.Addr(), root))
					b.Cleanup(func() { _ = cs[i].Close() })
					conn := admin(b, srv.Addr())
					for j := range layout.perSession {
						locks[i*layout.perSession+j] = zk.NewLock(conn, root+"/newlock", zk.WorldACL(zk.PermAll))
					}
				}
				peer := locktest.Contender{Name: "newlock", Lock: func(_ context.Context, i int) (func() error, error) {
					l := locks[i]
					if err := l.Lock(); err != nil {
						return nil, err
					}
					return l.Unlock, nil
				}}
				ours := locktest.Contender{Name: "distlock", Lock: func(ctx context.Context, i int) (func() error, error) {
					l, err := cs[i/layout.perSession].Lock(ctx, "contended", distlock.WithLease(30*time.Second))
					if err != nil {
						return nil, err
					}
					return func() error { return l.Release(ctx) }, nil
				}}
				locktest.CompareContended(b, locktest.Load{Lockers: lockers, Think: think, Requests: func() int64 { return received(b, srv.Addr()) }}, peer, ours)
			})
		}
	}
}

// received returns the number of packets the server at addr has received,
// from its "srvr" command (which counts as one, and pings count too).
func received(b *testing.B, addr string) int64 {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(conn)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "Received: "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("srvr: no Received line in %q", out)
	return 0
}

// BenchmarkLossNotice is locktest.LossNotice: a holder learns of a forced
// release from its watch of its node, which starts after lossWatchDelay
// (100 ms), so each hold lasts 150 ms first.
func BenchmarkLossNotice(b *testing.B) {
	srv := testserver.ZooKeeper(b)
	root := uniqueRoot(b)
	holder, operator := distlock.New(dial(b, srv.Addr(), root)), distlock.New(dial(b, srv.Addr(), root))
	defer holder.Close()
	defer operator.Close()
	locktest.LossNotice(b, holder, operator, 150*time.Millisecond)
}
