package remotelock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// batcher sends the short lock calls of concurrent callers (an Acquire
// without a wait, Renew, Release) as few requests. What such a call costs
// the service and this process is mostly its request (HTTP/2 and Connect
// framing, a write per frame), not its store call, so under concurrency
// many calls in one Batch cost about one. A call is sent as its own RPC
// while fewer than maxInFlight requests of the batcher are out; otherwise
// it joins the next Batch, sent as soon as one returns. A lone caller
// therefore waits for nothing, and makes the plain call.
//
// A service without Batch (older than this client) answers Unimplemented:
// the batcher then sends every call alone.
type batcher struct {
	rpc     distlockv1connect.LockServiceClient
	timeout time.Duration   // bounds a batch, as the request timeout bounds a call
	closing context.Context // ends the batches in flight at Close
	alone   atomic.Bool     // the service has no Batch

	mu      sync.Mutex
	queue   []*batched // in order of arrival
	sending int        // requests in flight
	wg      sync.WaitGroup
}

// Bounds of a batch: the service takes up to 128 calls, and a request of
// at most 1 MiB by default.
const (
	maxInFlight   = 4
	maxBatch      = 64
	maxBatchBytes = 256 << 10
)

// batched is one call waiting for its batch.
type batched struct {
	call *distlockv1.BatchCall
	size int
	done chan batchAnswer // buffered: a caller that left is not waited for
}

type batchAnswer struct {
	res *distlockv1.BatchResult
	err error
}

func newBatcher(rpc distlockv1connect.LockServiceClient, timeout time.Duration, closing context.Context) *batcher {
	return &batcher{rpc: rpc, timeout: timeout, closing: closing}
}

// busy reports whether a call made now would join a batch rather than go
// at once.
func (c *batcher) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sending >= maxInFlight && !c.alone.Load()
}

// do makes call and returns its result; an error of the call is a
// *connect.Error as the plain RPC would have returned it. If ctx ends while
// the call waits for its batch, it is dropped; once sent, it may or may not
// take effect, as when a plain call is cut short.
func (c *batcher) do(ctx context.Context, call *distlockv1.BatchCall) (*distlockv1.BatchResult, error) {
	c.mu.Lock()
	if c.sending < maxInFlight || c.alone.Load() {
		c.sending++
		c.mu.Unlock()
		res, err := callAlone(ctx, c.rpc, call)
		c.mu.Lock()
		c.sending--
		c.startLocked()
		c.mu.Unlock()
		return res, err
	}
	t := &batched{call: call, size: proto.Size(call), done: make(chan batchAnswer, 1)}
	c.queue = append(c.queue, t)
	c.mu.Unlock()
	select {
	case a := <-t.done:
		return a.res, a.err
	case <-ctx.Done():
		c.drop(t)
		return nil, ctx.Err()
	}
}

// drop takes t out of the queue if it is still there.
func (c *batcher) drop(t *batched) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i := slices.Index(c.queue, t); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
	}
}

// wait waits for the batches in flight, which Close's end of closing cuts
// short.
func (c *batcher) wait() { c.wg.Wait() }

// startLocked sends the next batch if calls wait and fewer than maxInFlight
// requests are out. c.mu is held.
func (c *batcher) startLocked() {
	if c.sending >= maxInFlight || len(c.queue) == 0 {
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
// arrival, within the batch's bounds. c.mu is held.
func (c *batcher) takeLocked() []*batched {
	n, size := 0, 0
	for n < len(c.queue) && n < maxBatch && (n == 0 || size+c.queue[n].size <= maxBatchBytes) {
		size += c.queue[n].size
		n++
	}
	batch := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	return batch
}

// send makes batch's calls and answers each.
func (c *batcher) send(batch []*batched) {
	ctx, cancel := context.WithTimeout(c.closing, c.timeout)
	defer cancel()
	if len(batch) == 1 || c.alone.Load() {
		c.sendAlone(ctx, batch)
		return
	}
	calls := make([]*distlockv1.BatchCall, len(batch))
	for i, t := range batch {
		calls[i] = t.call
	}
	resp, err := c.rpc.Batch(ctx, connect.NewRequest(&distlockv1.BatchRequest{Calls: calls}))
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		c.alone.Store(true)
		c.sendAlone(ctx, batch)
		return
	}
	if err == nil && len(resp.Msg.GetResults()) != len(batch) {
		err = fmt.Errorf("remotelock: a batch of %d calls answered %d results", len(batch), len(resp.Msg.GetResults()))
	}
	for i, t := range batch {
		if err != nil {
			t.done <- batchAnswer{err: err}
			continue
		}
		t.done <- answerOf(t.call, resp.Msg.GetResults()[i])
	}
}

// sendAlone makes each of batch's calls as its own RPC, concurrently.
func (c *batcher) sendAlone(ctx context.Context, batch []*batched) {
	var wg sync.WaitGroup
	for _, t := range batch {
		wg.Go(func() {
			res, err := callAlone(ctx, c.rpc, t.call)
			t.done <- batchAnswer{res: res, err: err}
		})
	}
	wg.Wait()
}

// answerOf is a batch's result r as the answer to call.
func answerOf(call *distlockv1.BatchCall, r *distlockv1.BatchResult) batchAnswer {
	if e := r.GetError(); e != nil {
		return batchAnswer{err: connect.NewWireError(connect.Code(e.GetCode()), errors.New(e.GetMessage()))}
	}
	var ok bool
	switch call.GetCall().(type) {
	case *distlockv1.BatchCall_Acquire:
		ok = r.GetAcquire() != nil
	case *distlockv1.BatchCall_Renew:
		ok = r.GetRenew() != nil
	case *distlockv1.BatchCall_Release:
		ok = r.GetRelease() != nil
	}
	if !ok {
		return batchAnswer{err: fmt.Errorf("remotelock: the service answered a batched call %v with %v", call, r)}
	}
	return batchAnswer{res: r}
}

// callAlone makes call as its own RPC, its answer wrapped as a batch's.
func callAlone(ctx context.Context, rpc distlockv1connect.LockServiceClient, call *distlockv1.BatchCall) (*distlockv1.BatchResult, error) {
	switch m := call.GetCall().(type) {
	case *distlockv1.BatchCall_Acquire:
		resp, err := rpc.Acquire(ctx, connect.NewRequest(m.Acquire))
		if err != nil {
			return nil, err
		}
		return &distlockv1.BatchResult{Result: &distlockv1.BatchResult_Acquire{Acquire: resp.Msg}}, nil
	case *distlockv1.BatchCall_Renew:
		resp, err := rpc.Renew(ctx, connect.NewRequest(m.Renew))
		if err != nil {
			return nil, err
		}
		return &distlockv1.BatchResult{Result: &distlockv1.BatchResult_Renew{Renew: resp.Msg}}, nil
	case *distlockv1.BatchCall_Release:
		resp, err := rpc.Release(ctx, connect.NewRequest(m.Release))
		if err != nil {
			return nil, err
		}
		return &distlockv1.BatchResult{Result: &distlockv1.BatchResult_Release{Release: resp.Msg}}, nil
	}
	return nil, fmt.Errorf("remotelock: a batched call of no method: %v", call)
}
