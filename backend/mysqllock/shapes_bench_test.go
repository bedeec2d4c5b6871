package mysqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/mysqllock"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/locktest"
)

// The shapes users run, each against the raw GET_LOCK/RELEASE_LOCK pair in
// the same run, in alternating rounds of 256 acquisitions so that load on
// the machine hits both. Locks use WithLease(30s) (no watchdog). Every
// handle sets interpolateParams=true. "raw/mysqllock" is mysqllock's
// throughput relative to the raw pair's.
//
//	go test -run '^$' -bench Shapes -benchtime 4096x -count 3 ./backend/mysqllock/

// BenchmarkShapesUncontended: one goroutine cycling over 64 keys, TryLock
// and Release, through one client on a handle of its own; the raw pair is
// GET_LOCK(name, 0) and RELEASE_LOCK(name) on one pinned connection.
func BenchmarkShapesUncontended(b *testing.B) {
	s := testserver.MariaDB(b)
	raw := pinnedConns(b, s, 1)[0]
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("shapes/uncontended/%d", i)
	}
	var rawNext, next atomic.Int64
	c := distlock.New(newBackend(b, openDB(b, s, 4)))
	locktest.CompareContended(b, locktest.Load{},
		locktest.Contender{Name: "raw", Lock: func(ctx context.Context, _ int) (func() error, error) {
			return rawLock(ctx, raw, mysqllock.LockName(keys[rawNext.Add(1)%64]), 0)
		}},
		locktest.Contender{Name: "mysqllock", Lock: func(ctx context.Context, _ int) (func() error, error) {
			l, err := c.TryLock(ctx, keys[next.Add(1)%64], distlock.WithLease(30*time.Second))
			if err != nil {
				return nil, err
			}
			return func() error { return l.Release(ctx) }, nil
		}})
}

// BenchmarkShapesContended: 16 clients, each on a handle of one connection,
// lock one key, with no work and with 1 ms of work outside the lock; the raw
// pair is GET_LOCK(name, 60) and RELEASE_LOCK(name) on 16 pinned
// connections.
func BenchmarkShapesContended(b *testing.B) {
	const lockers = 16
	s := testserver.MariaDB(b)
	const key = "shapes/contended"
	name := mysqllock.LockName(key)
	raws := pinnedConns(b, s, lockers)
	clients := make([]*distlock.Client, lockers)
	for i := range clients {
		clients[i] = distlock.New(newBackend(b, openDB(b, s, 2)))
	}
	raw := locktest.Contender{Name: "raw", Lock: func(ctx context.Context, i int) (func() error, error) {
		return rawLock(ctx, raws[i], name, 60)
	}}
	mine := locktest.Contender{Name: "mysqllock", Lock: func(ctx context.Context, i int) (func() error, error) {
		l, err := clients[i].Lock(ctx, key, distlock.WithLease(30*time.Second), distlock.WithWait(time.Minute))
		if err != nil {
			return nil, err
		}
		return func() error { return l.Release(ctx) }, nil
	}}
	for _, think := range []time.Duration{0, time.Millisecond} {
		b.Run(fmt.Sprintf("think=%v", think), func(b *testing.B) {
			locktest.CompareContended(b, locktest.Load{Lockers: lockers, Think: think}, raw, mine)
		})
	}
}

// pinnedConns returns n connections of a handle of their own.
func pinnedConns(b *testing.B, s *testserver.Server, n int) []*sql.Conn {
	db := openDB(b, s, n)
	conns := make([]*sql.Conn, n)
	for i := range conns {
		c, err := db.Conn(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		conns[i] = c
	}
	return conns
}

// rawLock takes name with GET_LOCK on conn and returns its RELEASE_LOCK.
func rawLock(ctx context.Context, conn *sql.Conn, name string, wait int) (func() error, error) {
	var ok sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, ?)", name, wait).Scan(&ok); err != nil || ok.Int64 != 1 {
		return nil, fmt.Errorf("GET_LOCK %q: %v %w", name, ok, err)
	}
	return func() error { return conn.QueryRowContext(ctx, "SELECT RELEASE_LOCK(?)", name).Scan(&ok) }, nil
}
