package remotelock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	"github.com/distlock/distlock/driver"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
	"github.com/distlock/distlock/internal/batch"
)

// batcher sends the short lock calls of concurrent callers (an Acquire
// without a wait, Renew, Release) as few requests (internal/batch). What
// such a call costs the service and this process is mostly its request
// (HTTP/2 and Connect framing, a write per frame), not its store call, so
// under concurrency many calls in one Batch cost about one. A call is sent
// as its own RPC while fewer than batchLimits.InFlight requests of the
// batcher are out; otherwise it joins the next Batch, sent as soon as one
// returns. A lone caller therefore waits for nothing, and makes the plain
// call.
//
// A service without Batch (older than this client) answers Unimplemented:
// the batcher then sends every call alone.
type batcher struct {
	rpc   distlockv1connect.LockServiceClient
	q     *batch.Queue[*distlockv1.BatchCall, *distlockv1.BatchResult]
	stop  context.CancelFunc // ends the requests in flight, at close
	alone atomic.Bool        // the service has no Batch
}

// Bounds of a batch: the service takes up to 128 calls, and a request of
// at most 1 MiB by default.
var batchLimits = batch.Limits{InFlight: 4, Calls: 64, Bytes: 256 << 10}

// newBatcher returns a batcher whose requests are bounded by timeout. It
// sends calls until close, so that the calls a backend's Close waits for
// (the release of what a cut wait may have taken) are still made.
func newBatcher(rpc distlockv1connect.LockServiceClient, timeout time.Duration) *batcher {
	c := &batcher{rpc: rpc}
	var closing context.Context
	closing, c.stop = context.WithCancel(context.Background())
	c.q = batch.New(batchLimits, timeout, closing, c.send)
	return c
}

// busy reports whether a call made now would join a batch rather than go
// at once.
func (c *batcher) busy() bool { return !c.alone.Load() && c.q.Busy() }

// do makes call and returns its result; an error of the call is a
// *connect.Error as the plain RPC would have returned it. If ctx ends while
// the call waits for its batch, it is dropped; once sent, it may or may not
// take effect, as when a plain call is cut short.
func (c *batcher) do(ctx context.Context, call *distlockv1.BatchCall) (*distlockv1.BatchResult, error) {
	return c.q.Do(ctx, call, "", proto.Size(call))
}

// close ends the requests in flight and waits for them; queued and later
// calls fail with driver.ErrClosed.
func (c *batcher) close() {
	c.stop()
	c.q.Close(driver.ErrClosed)
}

// send makes calls, as one Batch or each alone, and answers each.
func (c *batcher) send(ctx context.Context, calls []*batch.Call[*distlockv1.BatchCall, *distlockv1.BatchResult]) {
	if len(calls) == 1 || c.alone.Load() {
		c.sendAlone(ctx, calls)
		return
	}
	req := &distlockv1.BatchRequest{Calls: make([]*distlockv1.BatchCall, len(calls))}
	for i, t := range calls {
		req.Calls[i] = t.Arg
	}
	resp, err := c.rpc.Batch(ctx, connect.NewRequest(req))
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		c.alone.Store(true)
		c.sendAlone(ctx, calls)
		return
	}
	if err == nil && len(resp.Msg.GetResults()) != len(calls) {
		err = fmt.Errorf("remotelock: a batch of %d calls answered %d results", len(calls), len(resp.Msg.GetResults()))
	}
	for i, t := range calls {
		if err != nil {
			t.Answer(nil, err)
			continue
		}
		t.Answer(answerOf(t.Arg, resp.Msg.GetResults()[i]))
	}
}

// sendAlone makes each of calls as its own RPC, concurrently.
func (c *batcher) sendAlone(ctx context.Context, calls []*batch.Call[*distlockv1.BatchCall, *distlockv1.BatchResult]) {
	var wg sync.WaitGroup
	for _, t := range calls {
		wg.Go(func() { t.Answer(callAlone(ctx, c.rpc, t.Arg)) })
	}
	wg.Wait()
}

// answerOf is a batch's result r as the answer to call.
func answerOf(call *distlockv1.BatchCall, r *distlockv1.BatchResult) (*distlockv1.BatchResult, error) {
	if e := r.GetError(); e != nil {
		return nil, connect.NewWireError(connect.Code(e.GetCode()), errors.New(e.GetMessage()))
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
		return nil, fmt.Errorf("remotelock: the service answered a batched call %v with %v", call, r)
	}
	return r, nil
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
