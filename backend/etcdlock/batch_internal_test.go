package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// queueBehindFullBatcher starts each call with the batcher's batches held
// back, waits until all are queued, and lets them go: they meet in
// batches, as concurrent calls do under load. It returns each call's error.
func queueBehindFullBatcher(t *testing.T, c *batcher, calls []func() error) []error {
	t.Helper()
	release := c.q.Hold()
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	for deadline := time.Now().Add(10 * time.Second); c.q.Queued() != len(calls); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d calls queued", c.q.Queued(), len(calls))
		}
	}
	release()
	wg.Wait()
	return errs
}

// etcd evaluates every comparison of a transaction, nested ones included,
// before it writes: calls on one key that met in a batch would all find it
// free. A batch holds one call per key, so exactly one is granted.
func TestBatchHoldsOneCallPerKey(t *testing.T) {
	cli := renewerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newBatcher(cli, 5*time.Second, ctx)
	defer c.close()
	const dir = "batch/one/"
	granted := make([]bool, 16)
	calls := make([]func() error, len(granted))
	for i := range calls {
		calls[i] = func() error {
			resp, err := c.txn(ctx, dir, 16, []clientv3.Cmp{emptyDir(dir)}, []clientv3.Op{clientv3.OpPut(fmt.Sprintf("%s%02d", dir, i), "")}, nil)
			if err == nil {
				granted[i] = resp.Succeeded
			}
			return err
		}
	}
	for i, err := range queueBehindFullBatcher(t, c, calls) {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	n := 0
	for _, ok := range granted {
		if ok {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d calls took one empty directory, want 1", n)
	}
}

// etcd refuses a whole transaction that puts a key on a lease that is gone.
// A batch holding such a call is sent again call by call: the others
// succeed, and that call alone gets the error.
func TestBatchWithAGoneLeaseAnswersEachCall(t *testing.T) {
	cli := renewerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newBatcher(cli, 5*time.Second, ctx)
	defer c.close()
	live, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	calls := make([]func() error, 8)
	for i := range calls {
		lease := live.ID
		if i == 3 {
			lease = gone.ID
		}
		calls[i] = func() error {
			dir := fmt.Sprintf("batch/lease/%d/", i)
			_, err := c.txn(ctx, dir, 16, nil, []clientv3.Op{clientv3.OpPut(dir+"entry", "", clientv3.WithLease(lease))}, nil)
			return err
		}
	}
	for i, err := range queueBehindFullBatcher(t, c, calls) {
		switch {
		case i == 3 && !errors.Is(err, rpctypes.ErrLeaseNotFound):
			t.Errorf("the call on a gone lease: %v, want ErrLeaseNotFound", err)
		case i != 3 && err != nil:
			t.Errorf("call %d, beside one on a gone lease: %v", i, err)
		}
	}
}

// A call whose caller left while it was queued is not sent: the key it
// would have taken stays free.
func TestBatchDropsALeftCall(t *testing.T) {
	cli := renewerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newBatcher(cli, 5*time.Second, ctx)
	defer c.close()
	release := c.q.Hold() // every batch held back: the call queues
	left, leave := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.txn(left, "batch/left/", 16, nil, []clientv3.Op{clientv3.OpPut("batch/left/entry", "")}, nil)
		done <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); c.q.Queued() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call never queued")
		}
	}
	leave()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a call whose caller left: %v, want context.Canceled", err)
	}
	release()
	if _, err := c.txn(ctx, "batch/after/", 16, nil, []clientv3.Op{clientv3.OpPut("batch/after/entry", "")}, nil); err != nil {
		t.Fatal(err) // sent after the left one would have been, in the same order
	}
	resp, err := cli.Get(ctx, "batch/left/entry")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Error("the call of a caller that left while it was queued was sent")
	}
}
