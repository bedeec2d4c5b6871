package etcdlock_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkLockRelease compares Lock+Release through distlock.Client with
// the store's floor for the same work, in alternating rounds: a put-if-absent
// transaction on a lease granted once, then a delete. "serial" measures
// latency and "parallel" throughput, each goroutine on a key of its own;
// floor/distlock is distlock's throughput relative to the floor's.
func BenchmarkLockRelease(b *testing.B) {
	for _, srv := range servers {
		b.Run(srv.name, func(b *testing.B) {
			eps := srv.start(b)
			prefix := uniquePrefix(b)
			cli := admin(b, eps)
			c := distlock.New(dial(b, eps, prefix))
			b.Cleanup(func() { _ = c.Close() })
			lease, err := cli.Grant(context.Background(), 60)
			if err != nil {
				b.Fatal(err)
			}
			floor := locktest.Op{Name: "floor", Do: func(ctx context.Context, key string) error {
				k := prefix + "/floor/" + key
				resp, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
					Then(clientv3.OpPut(k, "", clientv3.WithLease(lease.ID))).Commit()
				if err != nil {
					return err
				}
				if !resp.Succeeded {
					return fmt.Errorf("floor: %q taken", k)
				}
				_, err = cli.Delete(ctx, k)
				return err
			}}
			lock := locktest.Op{Name: "distlock", Do: func(ctx context.Context, key string) error {
				l, err := c.Lock(ctx, key)
				if err != nil {
					return err
				}
				return l.Release(ctx)
			}}
			for _, mode := range []string{"serial", "parallel"} {
				b.Run(mode, func(b *testing.B) { locktest.Compare(b, mode, floor, lock) })
			}
		})
	}
}

// BenchmarkContended runs 16, then 1024 goroutines on 4 connections against
// one key, through etcdlock (with and without WithLinkedQueue) and through
// etcd's own concurrency.Mutex. With 1024, a handoff happens behind a queue
// of about a thousand waiters: with linked queues its cost must not grow
// with the queue.
func BenchmarkContended(b *testing.B) {
	const conns = 4
	for _, srv := range servers {
		b.Run(srv.name, func(b *testing.B) {
			eps := srv.start(b)
			for _, lockers := range []int{16, 1024} {
				b.Run(fmt.Sprint(lockers), func(b *testing.B) { contended(b, eps, lockers, conns) })
			}
		})
	}
}

func contended(b *testing.B, eps []string, lockers, conns int) {
	for _, mode := range []struct {
		name string
		opts []etcdlock.Option
	}{{"etcdlock", nil}, {"etcdlock-linked", []etcdlock.Option{etcdlock.WithLinkedQueue()}}} {
		b.Run(mode.name, func(b *testing.B) {
			prefix := uniquePrefix(b)
			cs := make([]*distlock.Client, conns)
			for i := range cs {
				cs[i] = distlock.New(dial(b, eps, prefix, mode.opts...))
				b.Cleanup(func() { _ = cs[i].Close() })
			}
			locktest.Contend(b, lockers, func(ctx context.Context, i int) (func() error, error) {
				l, err := cs[i%conns].Lock(ctx, "contended", distlock.WithWait(time.Minute))
				if err != nil {
					return nil, err
				}
				return func() error { return l.Release(ctx) }, nil
			})
		})
	}
	b.Run("concurrency.Mutex", func(b *testing.B) {
		prefix := uniquePrefix(b)
		clis := make([]*clientv3.Client, conns)
		for i := range clis {
			clis[i] = admin(b, eps)
		}
		mus := make([]*concurrency.Mutex, lockers)
		for i := range mus {
			s, err := concurrency.NewSession(clis[i%conns], concurrency.WithTTL(30))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			mus[i] = concurrency.NewMutex(s, prefix+"/contended")
		}
		locktest.Contend(b, lockers, func(ctx context.Context, i int) (func() error, error) {
			if err := mus[i].Lock(ctx); err != nil {
				return nil, err
			}
			return func() error { return mus[i].Unlock(ctx) }, nil
		})
	})
}

// BenchmarkList lists namespaces of 1 000 and 10 000 held keys in each key
// layout: all of the smaller with List, and the first and the last page of
// 100 of each with ListPage, as the service's List RPC does.
func BenchmarkList(b *testing.B) {
	for _, srv := range servers {
		eps := srv.start(b)
		for _, held := range []int{1000, 10000} {
			for _, l := range layouts {
				b.Run(fmt.Sprintf("%s/%s/%d", srv.name, l.layout, held), func(b *testing.B) {
					benchmarkList(b, eps, l.layout, held)
				})
			}
		}
	}
}

func benchmarkList(b *testing.B, eps []string, layout etcdlock.KeyLayout, held int) {
	c := distlock.New(dial(b, eps, uniquePrefix(b), etcdlock.WithKeyLayout(layout)))
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	for i := range held {
		if _, err := c.Lock(ctx, fmt.Sprintf("orders/%05d", i)); err != nil {
			b.Fatal(err)
		}
	}
	if held <= 1000 {
		b.Run("List", func(b *testing.B) {
			for b.Loop() {
				if infos, err := c.List(ctx, "orders/"); err != nil || len(infos) != held {
					b.Fatalf("List = %d holders, %v; want %d", len(infos), err, held)
				}
			}
		})
	}
	for name, after := range map[string]string{"ListPage100First": "", "ListPage100Last": fmt.Sprintf("orders/%05d", held-101)} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if infos, err := c.ListPage(ctx, "orders/", after, 100); err != nil || len(infos) != 100 {
					b.Fatalf("ListPage = %d holders, %v; want 100", len(infos), err)
				}
			}
		})
	}
}

// BenchmarkLossNotice is locktest.LossNotice: a holder learns of a forced
// release from its watch of its entry, which starts after lossWatchDelay
// (100 ms), so each hold lasts 150 ms first.
func BenchmarkLossNotice(b *testing.B) {
	for _, srv := range servers {
		b.Run(srv.name, func(b *testing.B) {
			eps := srv.start(b)
			prefix := uniquePrefix(b)
			holder, operator := distlock.New(dial(b, eps, prefix)), distlock.New(dial(b, eps, prefix))
			defer holder.Close()
			defer operator.Close()
			locktest.LossNotice(b, holder, operator, 150*time.Millisecond)
		})
	}
}

// BenchmarkLockAll is Client.LockAll and Release of sets of 2, 4 and 8
// keys, one caller, each set in one transaction and key by key, against
// Lock+Release of one key (locktest.BenchLockAll).
//
//	go test -run '^$' -bench LockAll -count 3 ./backend/etcdlock/
func BenchmarkLockAll(b *testing.B) {
	for _, srv := range servers {
		b.Run(srv.name, func(b *testing.B) {
			eps, prefix := srv.start(b), uniquePrefix(b)
			locktest.BenchLockAll(b, func(t testing.TB) driver.Backend { return dial(t, eps, prefix) })
		})
	}
}
