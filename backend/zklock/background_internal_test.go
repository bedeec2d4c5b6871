package zklock

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock/internal/testserver"
)

// TestBackgroundDuringClose starts background work from other goroutines
// while Close waits for the backend's goroutines, as a waiter does when a
// request it gave up on at Close answers late: every piece of work must
// still run, none may start after Close returned, and the race detector
// must see no WaitGroup reuse.
func TestBackgroundDuringClose(t *testing.T) {
	srv := testserver.Shared(t, "zookeeper", testserver.ZooKeeper) // see zkServer
	for round := range 20 {
		conn, events, err := zk.Connect([]string{srv.Addr()}, 4*time.Second, zk.WithLogger(quietLog{}))
		if err != nil {
			t.Fatal(err)
		}
		b, err := New(conn, events)
		if err != nil {
			t.Fatal(err)
		}
		var started, ran atomic.Int64
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 50 {
					started.Add(1)
					b.background(func(context.Context) { ran.Add(1) })
				}
			})
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if started.Load() != ran.Load() {
			t.Fatalf("round %d: %d pieces of background work started, %d ran", round, started.Load(), ran.Load())
		}
		conn.Close()
	}
}

type quietLog struct{}

func (quietLog) Printf(string, ...any) {}
