package etcdlock_test

import (
	"context"
	"fmt"
	"slices"
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

// storeReads counts what a client's requests make etcd hand back: the keys
// of every range read, alone or in a transaction, and the lease lookups.
type storeReads struct {
	mu     sync.Mutex
	keys   int
	leases int
}

func (s *storeReads) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r := reply.(type) {
	case *pb.RangeResponse:
		s.keys += len(r.Kvs)
	case *pb.TxnResponse:
		for _, op := range r.Responses {
			if rr := op.GetResponseRange(); rr != nil {
				s.keys += len(rr.Kvs)
			}
		}
	case *pb.LeaseTimeToLiveResponse:
		s.leases++
	}
	return err
}

func (s *storeReads) reset() (keys, leases int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys, leases = s.keys, s.leases
	s.keys, s.leases = 0, 0
	return keys, leases
}

// TestListPageReadsOnePage holds many keys of a namespace of the ordered
// layout, among them keys whose escaped forms would sort apart from their
// byte order, one with a waiter and one with a queue longer than a page,
// and lists them a page at a time: the pages hold every key once, in byte
// order, with its holder, and each page reads from the store about a page
// of keys and the leases of its holders, not the namespace.
func TestListPageReadsOnePage(t *testing.T) {
	const held, page = 600, 25
	e := newStoreEnv(t)
	reads := &storeReads{}
	b, err := etcdlock.Dial(e.ctx, clientv3.Config{Endpoints: e.eps, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(reads.interceptor)}},
		etcdlock.WithPrefix(e.prefix), etcdlock.WithKeyLayout(etcdlock.KeyLayoutOrdered))
	if err != nil {
		t.Fatal(err)
	}
	c := distlock.New(b)
	defer c.Close()
	want := []string{"o", "o-1", "o/1", "o.1", "o 1", "o~", "o_", "o:", "oé", "o\u00a0", "o/", "o/-"}
	for i := len(want); i < held; i++ {
		want = append(want, fmt.Sprintf("o/%04d", i))
	}
	fences := make(map[string]uint64)
	for _, k := range want {
		l, err := c.Lock(e.ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		fences[k] = l.Fence()
	}
	// A queue longer than a page, as a deep key's waiters make it.
	const deep, deepWaiters = "o/0200", 3 * page
	lease, err := e.cli.Grant(e.ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for i := range deepWaiters {
		entry := fmt.Sprintf("%s%016x", etcdlock.Dir(e.prefix, etcdlock.KeyLayoutOrdered, deep), i+1)
		if _, err := e.cli.Put(e.ctx, entry, `{"token":"a-waiter-of-the-deep-key","meta":{}}`, clientv3.WithLease(lease.ID)); err != nil {
			t.Fatal(err)
		}
	}
	// A waiter behind one holder: its entry is in the store, not in a list.
	waiter := waitFor(e.ctx, e.client(t), "o/0100", distlock.WithWait(time.Minute))
	queueLength(t, e.cli, e.prefix, "o/0100", 2)
	slices.Sort(want)
	var got []string
	after := ""
	for range held/page + 2 {
		reads.reset()
		infos, err := c.ListPage(e.ctx, "o", after, page)
		if err != nil {
			t.Fatal(err)
		}
		keys, leases := reads.reset()
		bound := 3*page + 8
		if len(infos) > 0 && infos[0].Key <= deep && deep <= infos[len(infos)-1].Key {
			bound += 2 * deepWaiters // read in the page's range, and again as the queue of its holder
		}
		if keys > bound || leases > page {
			t.Errorf("a page of %d after %q read %d keys and %d leases; want at most %d and %d", len(infos), after, keys, leases, bound, page)
		}
		for _, i := range infos {
			got = append(got, i.Key)
			if i.Fence != fences[i.Key] {
				t.Errorf("%q listed with fence %d, its holder's is %d", i.Key, i.Fence, fences[i.Key])
			}
		}
		if len(infos) < page {
			break
		}
		after = infos[len(infos)-1].Key
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages listed %d keys, want %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
	select {
	case r := <-waiter:
		t.Fatalf("the waiter ended while the key was held: %v", r.err)
	default:
	}
}

// firstDiff returns the first index at which a and b differ.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
