package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/zklock"
	"github.com/distlock/distlock/internal/faultproxy"
)

// TestSessionExpiryReportsLostFirst partitions the holder from ZooKeeper past
// its session timeout: the holder must hear that its lock is lost before the
// server expires the session and grants the lock to the waiter.
func TestSessionExpiryReportsLostFirst(t *testing.T) {
	srv := zkServer(t)
	proxy := faultproxy.Start(t, srv.Addr())
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const timeout = 2 * time.Second
	holder := distlock.New(dial(t, proxy.Addr(), root, zklock.WithSessionTimeout(timeout)))
	defer holder.Close()
	waiter := distlock.New(dial(t, srv.Addr(), root))
	defer waiter.Close()

	l, err := holder.Lock(ctx, "expiring")
	if err != nil {
		t.Fatal(err)
	}
	lostAt := make(chan time.Time, 1)
	go func() {
		select {
		case <-l.Done():
			lostAt <- time.Now()
		case <-ctx.Done():
		}
	}()
	type grant struct {
		l          *distlock.Lock
		at         time.Time
		holderLost bool // the holder's Done was closed when the grant came
		err        error
	}
	granted := make(chan grant, 1)
	go func() {
		wl, err := waiter.Lock(ctx, "expiring", distlock.WithWait(30*time.Second))
		g := grant{l: wl, at: time.Now(), err: err}
		select {
		case <-l.Done():
			g.holderLost = true
		default:
		}
		granted <- g
	}()
	awaitQueue(t, conn, root, "expiring", "the waiter queues behind the holder", queueLen(2))
	proxy.Blackhole()
	partitioned := time.Now()

	var g grant
	select {
	case g = <-granted:
	case <-ctx.Done():
		t.Fatal("the waiter was not granted within the test's minute")
	}
	if g.err != nil {
		t.Fatalf("waiter: %v", g.err)
	}
	defer g.l.Release(ctx)
	if !g.holderLost {
		t.Fatalf("the waiter was granted %v after the partition while the holder still believed it held the lock", g.at.Sub(partitioned))
	}
	var lost time.Time
	select {
	case lost = <-lostAt:
	case <-ctx.Done():
		t.Fatal("the holder's loss was never observed")
	}
	if !errors.Is(l.Err(), distlock.ErrLockLost) {
		t.Fatalf("holder Err = %v, want ErrLockLost", l.Err())
	}
	if g.l.Fence() <= l.Fence() {
		t.Fatalf("new fence %d not above the lost holder's %d", g.l.Fence(), l.Fence())
	}
	t.Logf("partitioned at 0, holder told lost at %v, waiter granted at %v (session timeout %v)",
		lost.Sub(partitioned), g.at.Sub(partitioned), timeout)
	proxy.Restore()
}

// TestFIFO queues 50 waiters on one key, each entering after the one before
// it is in the queue, and checks that they are granted in that order, one at
// a time.
func TestFIFO(t *testing.T) {
	const waiters, conns = 50, 5
	srv := zkServer(t)
	conn := admin(t, srv.Addr())
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := make([]*distlock.Client, conns)
	for i := range cs {
		cs[i] = distlock.New(dial(t, srv.Addr(), root))
		defer cs[i].Close()
	}
	const key = "fifo"
	holder, err := cs[0].Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		order  []int
		inside atomic.Int32
		wg     sync.WaitGroup
		errs   = make(chan error, waiters)
	)
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := cs[i%conns].Lock(ctx, key, distlock.WithWait(time.Minute))
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			if inside.Add(1) != 1 {
				errs <- fmt.Errorf("waiter %d: two holders at once", i)
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			inside.Add(-1)
			if err := l.Release(ctx); err != nil {
				errs <- fmt.Errorf("waiter %d: release: %w", i, err)
			}
		}()
		// Arrival order is queue order: wait until this waiter's node is in.
		for deadline := time.Now().Add(10 * time.Second); len(queue(t, conn, root, key)) < i+2; {
			if time.Now().After(deadline) {
				t.Fatalf("waiter %d never queued", i)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := make([]int, waiters)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Fatalf("grant order %v, want arrival order", order)
	}
}
