package zklock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
)

// TestInspectBusyKey: Inspect and List of a key whose holders come and go
// without pause answer every time. Four clients hand the key round as fast
// as they can while another inspects and lists it 200 times; a read that
// finds the head of the queue gone looks at the next entry, instead of
// listing the queue again and giving up after three tries.
func TestInspectBusyKey(t *testing.T) {
	s := zkServer(t)
	root := uniqueRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "busy"
	churn, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for range 4 {
		c := distlock.New(dial(t, s.Addr(), root))
		defer c.Close()
		wg.Go(func() {
			for churn.Err() == nil {
				l, err := c.Lock(churn, key)
				if err != nil {
					return
				}
				_ = l.Release(ctx)
			}
		})
	}
	reader := distlock.New(dial(t, s.Addr(), root))
	defer reader.Close()
	var failed []error
	for i := range 200 {
		if _, err := reader.Inspect(ctx, key); err != nil {
			failed = append(failed, err)
		}
		if i%10 == 0 {
			if _, err := reader.List(ctx, ""); err != nil {
				failed = append(failed, err)
			}
		}
	}
	stop()
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("%d reads of a busy key failed, the first: %v", len(failed), failed[0])
	}
}
