package etcdlock

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/batch"
)

// batcher sends the transactions of concurrent calls as one etcd
// transaction, each call's nested in it (etcd 3.3 and later). What a lock
// call costs etcd is mostly the request's own cost (gRPC, a raft entry, its
// sync), not the keys it writes, so under concurrency many calls cost about
// one. A call is sent at once while fewer than maxInFlight batches are in
// flight; otherwise it joins the next batch, sent as soon as one returns
// (internal/batch). A lone caller therefore waits for nothing.
//
// A batch holds at most one call per lock key: etcd evaluates every
// comparison of a transaction, nested ones included, before it writes, so
// two calls on one key in one batch would both find it free.
type batcher struct {
	kv clientv3.KV
	q  *batch.Queue[txnCall, *clientv3.TxnResponse]
}

// Bounds of one batch. etcd refuses a transaction of more than 128
// operations at one level (--max-txn-ops) or over 1.5 MiB (its default
// --max-request-bytes).
var batchLimits = batch.Limits{InFlight: 2, Calls: 64, Bytes: 512 << 10}

// txnCall is one call's transaction: If(cmps).Then(then).Else(els).
type txnCall struct {
	cmps []clientv3.Cmp
	then []clientv3.Op
	els  []clientv3.Op
}

// newBatcher returns a batcher whose batches are bounded by timeout and
// ended by closing.
func newBatcher(kv clientv3.KV, timeout time.Duration, closing context.Context) *batcher {
	c := &batcher{kv: kv}
	c.q = batch.New(batchLimits, timeout, closing, c.send)
	return c
}

// txn commits If(cmps).Then(then).Else(els) on the lock key whose directory
// is dir, with other calls' transactions, and returns its own response,
// whose header is the batch's. size is about the bytes of its keys and
// values. If ctx ends first, txn returns its error: a transaction still
// queued is dropped, one already sent may or may not be committed, as when
// a lone request is cut short.
func (c *batcher) txn(ctx context.Context, dir string, size int, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	return c.q.Do(ctx, txnCall{cmps: cmps, then: then, els: els}, dir, size)
}

// close ends the batches in flight and waits for them; later calls fail
// with driver.ErrClosed. The caller has ended closing.
func (c *batcher) close() { c.q.Close(driver.ErrClosed) }

// send commits calls and answers each. A batch that etcd refused for what
// one call holds (a lease gone, say) is sent again one call at a time, so
// that each call gets its own answer.
func (c *batcher) send(ctx context.Context, calls []*batch.Call[txnCall, *clientv3.TxnResponse]) {
	if len(calls) == 1 {
		c.sendAlone(ctx, calls[0])
		return
	}
	ops := make([]clientv3.Op, len(calls))
	for i, t := range calls {
		ops[i] = clientv3.OpTxn(t.Arg.cmps, t.Arg.then, t.Arg.els)
	}
	resp, err := c.kv.Txn(ctx).Then(ops...).Commit()
	if err != nil && refusedForOneCall(err) {
		for _, t := range calls {
			c.sendAlone(ctx, t)
		}
		return
	}
	for i, t := range calls {
		if err != nil {
			t.Answer(nil, err)
			continue
		}
		own := resp.Responses[i].GetResponseTxn()
		t.Answer(&clientv3.TxnResponse{Header: resp.Header, Succeeded: own.Succeeded, Responses: own.Responses}, nil)
	}
}

// sendAlone commits t's transaction as a request of its own.
func (c *batcher) sendAlone(ctx context.Context, t *batch.Call[txnCall, *clientv3.TxnResponse]) {
	t.Answer(c.kv.Txn(ctx).If(t.Arg.cmps...).Then(t.Arg.then...).Else(t.Arg.els...).Commit())
}

// refusedForOneCall reports whether etcd refused a transaction for what one
// of its operations holds rather than for the request as a whole.
func refusedForOneCall(err error) bool {
	for _, e := range []error{rpctypes.ErrLeaseNotFound, rpctypes.ErrDuplicateKey, rpctypes.ErrTooManyOps, rpctypes.ErrRequestTooLarge} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
