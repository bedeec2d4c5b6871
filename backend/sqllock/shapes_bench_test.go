package sqllock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// BenchmarkShapesPostgres measures the lease table on PostgreSQL in the
// shapes users run, against its own uncontended rate in the same run (one
// goroutine cycling over 64 keys through one client), in alternating rounds
// of 256 acquisitions so that load on the machine hits all alike: 16 clients
// (each a replica with its own pool) on one key, and one client shared by 16
// goroutines, with no work and with 1 ms of work outside the lock (the
// uncontended rate is taken without it). Locks use WithLease(30s); the
// "-noqueue" variants use WithoutWaitQueue. "uncontended/<name>" is <name>'s
// rate relative to the uncontended one; the goal is at least 0.5, with p99
// wait at most 10 ms and top/fair at most 1.1.
//
//	go test -run '^$' -bench ShapesPostgres -benchtime 2048x ./backend/sqllock/
func BenchmarkShapesPostgres(b *testing.B) {
	s := testserver.Postgres(b)
	st := store{s: s, driver: "pgx", dsn: testserver.PostgresDSN(s), dialect: sqllock.Postgres}
	ctx := context.Background()
	open := func(opts ...sqllock.Option) *distlock.Client {
		be := st.open(b, opts...)
		if err := be.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		c := distlock.New(be)
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	const lockers = 16
	solo := open()
	shared, sharedNQ := open(), open(sqllock.WithoutWaitQueue())
	clients, clientsNQ := make([]*distlock.Client, lockers), make([]*distlock.Client, lockers)
	for i := range clients {
		clients[i], clientsNQ[i] = open(), open(sqllock.WithoutWaitQueue())
	}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("shapes/uncontended/%d", i)
	}
	var next atomic.Int64
	lease := distlock.WithLease(30 * time.Second)
	uncontended := locktest.Contender{Name: "uncontended", Lockers: 1, Lock: func(ctx context.Context, _ int) (func() error, error) {
		l, err := solo.TryLock(ctx, keys[next.Add(1)%64], lease)
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(ctx) }, nil
	}}
	on := func(name string, client func(i int) *distlock.Client) locktest.Contender {
		key := "shapes/" + name // the variants do not share a queue
		return locktest.Contender{Name: name, Lockers: lockers, Lock: func(ctx context.Context, i int) (func() error, error) {
			l, err := client(i).Lock(ctx, key, lease, distlock.WithWait(time.Minute))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}}
	}
	sixteen := on("16clients", func(i int) *distlock.Client { return clients[i] })
	one := on("1client", func(int) *distlock.Client { return shared })
	sixteenNQ := on("16clients-noqueue", func(i int) *distlock.Client { return clientsNQ[i] })
	oneNQ := on("1client-noqueue", func(int) *distlock.Client { return sharedNQ })
	for _, think := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("think=%v", think), func(b *testing.B) {
			locktest.CompareContended(b, locktest.Load{Think: think}, uncontended, sixteen, sixteenNQ, one, oneNQ)
		})
	}
}
