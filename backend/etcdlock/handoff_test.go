package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/etcdlock"
)

// queueReads counts the range reads a client sends that make etcd read a
// whole directory: a prefix range that is sorted (other than by key,
// ascending), filtered by revision, or unlimited, and a compare over a
// prefix. etcd serves each of them by reading every key in the range.
type queueReads struct {
	mu    sync.Mutex
	count int
	seen  []string
}

func (q *queueReads) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch r := req.(type) {
	case *pb.RangeRequest:
		q.check(r)
	case *pb.TxnRequest:
		q.txn(r)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (q *queueReads) txn(t *pb.TxnRequest) {
	q.compares(t.Compare)
	for _, ops := range [][]*pb.RequestOp{t.Success, t.Failure} {
		for _, op := range ops {
			if r := op.GetRequestRange(); r != nil {
				q.check(r)
			}
			// etcd evaluates a nested transaction's compares only on
			// the branch it takes, which the request does not tell.
			if n := op.GetRequestTxn(); n != nil {
				q.txn(&pb.TxnRequest{Success: n.Success, Failure: n.Failure})
			}
		}
	}
}

// compares counts the compares over a range: etcd compares every key of it.
func (q *queueReads) compares(cmps []*pb.Compare) {
	for _, c := range cmps {
		if len(c.RangeEnd) != 0 { // etcd compares every key of the range
			q.mu.Lock()
			q.count++
			q.seen = append(q.seen, fmt.Sprintf("compare over %q", c.Key))
			q.mu.Unlock()
		}
	}
}

func (q *queueReads) check(r *pb.RangeRequest) {
	if len(r.RangeEnd) == 0 {
		return // one key
	}
	sorted := r.SortOrder != pb.RangeRequest_NONE &&
		!(r.SortOrder == pb.RangeRequest_ASCEND && r.SortTarget == pb.RangeRequest_KEY)
	filtered := r.MinCreateRevision != 0 || r.MaxCreateRevision != 0 || r.MinModRevision != 0 || r.MaxModRevision != 0
	if sorted || filtered || r.Limit == 0 {
		q.mu.Lock()
		q.count++
		q.seen = append(q.seen, fmt.Sprintf("%q sort=%v/%v maxCreate=%d limit=%d", r.Key, r.SortTarget, r.SortOrder, r.MaxCreateRevision, r.Limit))
		q.mu.Unlock()
	}
}

func (q *queueReads) reset() (int, []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n, seen := q.count, q.seen
	q.count, q.seen = 0, nil
	return n, seen
}

// TestHandoffReadsNoWholeQueue queues waiters of a linked queue
// (WithLinkedQueue) behind a holder and releases them one by one: neither queueing, nor a refused TryLock, nor a handoff may
// read the whole queue,
// so that a release costs the store the same with 5 waiters or 5 000.
func TestHandoffReadsNoWholeQueue(t *testing.T) {
	const waiters = 12
	e := newStoreEnv(t)
	cli, prefix, ctx := e.cli, e.prefix, e.ctx
	reads := &queueReads{}
	b, err := etcdlock.Dial(ctx, clientv3.Config{Endpoints: e.eps, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(reads.interceptor)}},
		etcdlock.WithPrefix(prefix), etcdlock.WithLinkedQueue())
	if err != nil {
		t.Fatal(err)
	}
	c := distlock.New(b)
	defer c.Close()
	const key = "busy"
	holder, err := c.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	queued := make([]<-chan result, waiters)
	for i := range queued {
		reads.reset()
		queued[i] = waitFor(ctx, c, key, distlock.WithWait(30*time.Second))
		queueLength(t, cli, prefix, key, i+2)
		time.Sleep(20 * time.Millisecond) // the waiter's first look at its predecessor
		if n, seen := reads.reset(); n != 0 {
			t.Fatalf("waiter %d queued with %d whole-queue reads: %q", i+1, n, seen)
		}
	}
	if _, err := c.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Fatalf("TryLock of the held key: %v, want ErrNotAcquired", err)
	}
	if n, seen := reads.reset(); n != 0 {
		t.Fatalf("a refused TryLock made %d whole-queue reads: %q", n, seen)
	}
	prev := holder
	for i, w := range queued {
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		prev = granted(t, w)
		if n, seen := reads.reset(); n != 0 {
			t.Fatalf("handoff to waiter %d made %d whole-queue reads: %q", i+1, n, seen)
		}
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
	left, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Kvs) != 0 {
		t.Fatalf("the drained queue left %d keys, the first %q", len(left.Kvs), left.Kvs[0].Key)
	}
}

// TestHandoffPastWaitersThatLeft queues four waiters, with and without
// linked queues, of which the second gives up and the third's entry is
// deleted behind its back, and releases:
// the lock goes to each remaining waiter in turn, never to two at once,
// although a waiter whose predecessor left learns no release from it.
func TestHandoffPastWaitersThatLeft(t *testing.T) {
	e := newStoreEnv(t)
	cli, prefix, ctx := e.cli, e.prefix, e.ctx
	clients := make([]*distlock.Client, 5)
	for i := range clients {
		var opts []etcdlock.Option
		if i%2 == 1 {
			opts = append(opts, etcdlock.WithLinkedQueue())
		}
		clients[i] = e.client(t, opts...)
	}
	const key = "busy"
	holder, err := clients[0].Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var queued []<-chan result
	var entry []string
	for i, budget := range []time.Duration{30 * time.Second, 2 * time.Second, 30 * time.Second, 30 * time.Second} {
		queued = append(queued, waitFor(ctx, clients[i+1], key, distlock.WithWait(budget)))
		entry = append(entry, queueLength(t, cli, prefix, key, i+2)[i+1])
	}
	if r := <-queued[1]; !errors.Is(r.err, distlock.ErrNotAcquired) {
		t.Fatalf("the waiter with a 2s budget: %v, want ErrNotAcquired", r.err)
	}
	// The third waiter notices when the entry ahead goes, and queues again
	// behind the fourth.
	deleteEntries(t, cli, entry[2:3])
	prev := holder
	order := []int{0, 3, 2}
	for n, i := range order {
		if err := prev.Release(ctx); err != nil {
			t.Fatal(err)
		}
		prev = granted(t, queued[i])
		for _, j := range order[n+1:] {
			select {
			case r := <-queued[j]:
				t.Fatalf("waiter %d returned (%v) while waiter %d holds", j+1, r.err, i+1)
			default:
			}
		}
	}
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestTryLockPastLeftoverTail leaves the queue's tail key on a live lease
// over an empty queue, as a waiter's entry deleted by hand does: a TryLock
// must still take the key, and deletes the tail, which names no entry.
func TestTryLockPastLeftoverTail(t *testing.T) {
	e := newStoreEnv(t)
	cli, prefix, ctx := e.cli, e.prefix, e.ctx
	a, b := e.client(t), e.client(t)
	const key = "dropped"
	if _, err := a.Lock(ctx, key); err != nil {
		t.Fatal(err)
	}
	gone := entries(t, cli, prefix, key)
	deleteEntries(t, cli, gone)
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	tail := prefix + "/" + etcdlock.Escape(layoutOf(t, cli, prefix), key) + ".tail"
	if _, err := cli.Put(ctx, tail, gone[0], clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	l, err := b.TryLock(ctx, key)
	if err != nil {
		t.Fatalf("TryLock of an empty queue with a leftover tail: %v", err)
	}
	if q := entries(t, cli, prefix, key); len(q) != 1 {
		t.Fatalf("queue after the TryLock: %q", q)
	}
	if left, err := cli.Get(ctx, tail); err != nil || len(left.Kvs) != 0 {
		t.Errorf("the leftover tail after the TryLock: %v %v, want it deleted", left, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// queueLength polls key's queue until it holds n entries, for at most 10s,
// and returns them.
func queueLength(t *testing.T, cli *clientv3.Client, prefix, key string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q := entries(t, cli, prefix, key)
		if len(q) == n {
			return q
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue holds %q after 10s, want %d entries", q, n)
		}
		time.Sleep(5 * time.Millisecond) // polling the store
	}
}

// TestOlderClientsEntryIsWaitedFor plays a rolling upgrade: a client of an
// earlier release, which keeps no tail key, queues between a holder and a
// waiter of this one. When the holder releases, the older client's entry is
// first, and the waiter must wait for it, not take the lock beside it.
func TestOlderClientsEntryIsWaitedFor(t *testing.T) {
	e := newStoreEnv(t)
	cli, prefix, ctx := e.cli, e.prefix, e.ctx
	a, b := e.client(t), e.client(t)
	const key = "upgrading"
	holder, err := a.Lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// The older client's entry, as its enqueue wrote it: on a lease of its
	// own, with no tail key.
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	older := fmt.Sprintf("%s%016x", etcdlock.Dir(prefix, etcdlock.KeyLayoutEscaped, key), int64(lease.ID))
	if _, err := cli.Put(ctx, older, `{"token":"older-client-token-0001","meta":{}}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	waiter := waitFor(ctx, b, key, distlock.WithWait(30*time.Second))
	queueLength(t, cli, prefix, key, 3)
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waiter:
		t.Fatalf("the waiter returned (%v) while the older client's entry is first", r.err)
	case <-time.After(time.Second):
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Fatal(err)
	}
	if err := granted(t, waiter).Release(ctx); err != nil {
		t.Fatal(err)
	}
}
