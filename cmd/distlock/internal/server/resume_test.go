package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
)

// TestWaiterKeepsItsPlaceAcrossCalls: a wait longer than one Acquire call
// (remotelock's max wait) is made of several calls, and keeps its place in
// the key's queue from one to the next. B queues first with calls of
// 500 ms, C queues after it with one long call; when the holder releases,
// after B's first call ended and its second began, B gets the key first.
func TestWaiterKeepsItsPlaceAcrossCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	svc := startRemoteService(t, remoteStores(t)[0])
	holder := distlock.New(remoteBackendAt(t, svc.addr, remoteClient))
	b := distlock.New(remoteBackendAt(t, svc.addr, remoteClient, remotelock.WithMaxWait(500*time.Millisecond)))
	c := distlock.New(remoteBackendAt(t, svc.addr, remoteClient))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const key = "resume/fifo"
	l, err := holder.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		order []string
		wg    sync.WaitGroup
	)
	wait := func(name string, cl *distlock.Client) {
		wg.Go(func() {
			got, err := cl.Lock(ctx, key, distlock.WithWait(20*time.Second))
			if err != nil {
				t.Errorf("%s: %v", name, err)
				return
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			if err := got.Release(ctx); err != nil {
				t.Errorf("%s: release: %v", name, err)
			}
		})
	}
	wait("B", b)
	time.Sleep(250 * time.Millisecond)
	wait("C", c)
	time.Sleep(1100 * time.Millisecond) // B's first two calls have ended
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(order) != 2 || order[0] != "B" {
		t.Fatalf("granted in the order %v, want B (queued first) then C", order)
	}
}
