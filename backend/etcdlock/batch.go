package etcdlock

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock/driver"
)

// batcher sends the transactions of concurrent calls as one etcd
// transaction, each call's nested in it (etcd 3.3 and later). What a lock
// call costs etcd is mostly the request's own cost (gRPC, a raft entry, its
// sync), not the keys it writes, so under concurrency many calls cost about
// one. A call is sent at once while fewer than maxInFlight batches are in
// flight; otherwise it joins the next batch, sent as soon as one returns.
// A lone caller therefore waits for nothing.
//
// A batch holds at most one call per lock key: etcd evaluates every
// comparison of a transaction, nested ones included, before it writes, so
// two calls on one key in one batch would both find it free.
type batcher struct {
	kv      clientv3.KV
	timeout time.Duration   // bounds a batch, as the request timeout bounds a call
	closing context.Context // ends the batches in flight at Close

	mu      sync.Mutex
	queue   []*batchedTxn // in order of arrival
	sending int           // batches in flight
	closed  bool
	wg      sync.WaitGroup // batches in flight
}

// Bounds of one batch. etcd refuses a transaction of more than 128
// operations at one level (--max-txn-ops) or over 1.5 MiB (its default
// --max-request-bytes).
const (
	maxInFlight = 2
	maxBatch    = 64
	maxBatchLen = 512 << 10 // bytes of keys and values, about
)

// batchedTxn is one call's transaction, waiting for its batch.
type batchedTxn struct {
	dir  string // its lock key's directory: one call per key in a batch
	size int    // bytes of its keys and values, about
	cmps []clientv3.Cmp
	then []clientv3.Op
	els  []clientv3.Op
	done chan batchResult // buffered: a caller that left is not waited for
}

type batchResult struct {
	resp *clientv3.TxnResponse
	err  error
}

func newBatcher(kv clientv3.KV, timeout time.Duration, closing context.Context) *batcher {
	return &batcher{kv: kv, timeout: timeout, closing: closing}
}

// txn commits If(cmps).Then(then).Else(els) on the lock key whose directory
// is dir, with other calls' transactions, and returns its own response,
// whose header is the batch's. size is about the bytes of its keys and
// values. If ctx ends first, txn returns its error: a transaction still
// queued is dropped, one already sent may or may not be committed, as when
// a lone request is cut short.
func (c *batcher) txn(ctx context.Context, dir string, size int, cmps []clientv3.Cmp, then, els []clientv3.Op) (*clientv3.TxnResponse, error) {
	t := &batchedTxn{dir: dir, size: size, cmps: cmps, then: then, els: els, done: make(chan batchResult, 1)}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, driver.ErrClosed
	}
	c.queue = append(c.queue, t)
	c.startLocked()
	c.mu.Unlock()
	select {
	case r := <-t.done:
		return r.resp, r.err
	case <-ctx.Done():
		c.drop(t)
		return nil, ctx.Err()
	}
}

// drop takes t out of the queue if it is still there: a caller that left
// before its transaction was sent leaves nothing in the store.
func (c *batcher) drop(t *batchedTxn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.queue, t); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
	}
}

// close ends the batches in flight and waits for them; later calls fail
// with driver.ErrClosed. The caller has ended closing.
func (c *batcher) close() {
	c.mu.Lock()
	c.closed = true
	for _, t := range c.queue {
		t.done <- batchResult{err: driver.ErrClosed}
	}
	c.queue = nil
	c.mu.Unlock()
	c.wg.Wait()
}

// startLocked sends the next batch if one is waiting and fewer than
// maxInFlight are in flight. c.mu is held.
func (c *batcher) startLocked() {
	if c.closed || c.sending >= maxInFlight || len(c.queue) == 0 {
		return
	}
	batch := c.takeLocked()
	c.sending++
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.send(batch)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sending--
		c.startLocked()
	}()
}

// takeLocked removes the next batch from the queue: calls in order of
// arrival, one per key, within the batch's bounds. c.mu is held.
func (c *batcher) takeLocked() []*batchedTxn {
	var (
		batch []*batchedTxn
		dirs  = make(map[string]bool)
		rest  = c.queue[:0]
		size  int
	)
	for _, t := range c.queue {
		fits := len(batch) == 0 || len(batch) < maxBatch && size+t.size <= maxBatchLen
		if !fits || dirs[t.dir] {
			rest = append(rest, t)
			continue
		}
		dirs[t.dir] = true
		size += t.size
		batch = append(batch, t)
	}
	clear(c.queue[len(rest):])
	c.queue = rest
	return batch
}

// send commits batch and answers each of its calls. A batch that etcd
// refused for what one call holds (a lease gone, say) is sent again one call
// at a time, so that each call gets its own answer.
func (c *batcher) send(batch []*batchedTxn) {
	ctx, cancel := context.WithTimeout(c.closing, c.timeout)
	defer cancel()
	if len(batch) == 1 {
		c.sendAlone(ctx, batch[0])
		return
	}
	ops := make([]clientv3.Op, len(batch))
	for i, t := range batch {
		ops[i] = clientv3.OpTxn(t.cmps, t.then, t.els)
	}
	resp, err := c.kv.Txn(ctx).Then(ops...).Commit()
	if err != nil && refusedForOneCall(err) {
		for _, t := range batch {
			c.sendAlone(ctx, t)
		}
		return
	}
	for i, t := range batch {
		if err != nil {
			t.done <- batchResult{err: err}
			continue
		}
		own := resp.Responses[i].GetResponseTxn()
		t.done <- batchResult{resp: &clientv3.TxnResponse{Header: resp.Header, Succeeded: own.Succeeded, Responses: own.Responses}}
	}
}

// sendAlone commits t's transaction as a request of its own.
func (c *batcher) sendAlone(ctx context.Context, t *batchedTxn) {
	resp, err := c.kv.Txn(ctx).If(t.cmps...).Then(t.then...).Else(t.els...).Commit()
	t.done <- batchResult{resp: resp, err: err}
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
