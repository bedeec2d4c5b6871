package server

import (
	"context"
	"errors"
	"sync"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// maxBatchCalls bounds the calls of one Batch, and so the goroutines one
// request can make the server run; remotelock sends at most 64.
const maxBatchCalls = 128

// Batch runs the calls of a batch concurrently, each as if it came alone:
// it is rate-limited, logged and measured under its own method, and
// answers its own result.
func (h *service) Batch(ctx context.Context, req *connect.Request[distlockv1.BatchRequest]) (*connect.Response[distlockv1.BatchResponse], error) {
	calls := req.Msg.GetCalls()
	if len(calls) > maxBatchCalls {
		return nil, invalid("batch: %d calls, at most %d", len(calls), maxBatchCalls)
	}
	id := callOf(ctx).id
	results := make([]*distlockv1.BatchResult, len(calls))
	var wg sync.WaitGroup
	for i, bc := range calls {
		wg.Go(func() {
			growStack() // a new goroutine's, as the guard grows a request's
			results[i] = h.batched(ctx, id, bc)
		})
	}
	wg.Wait()
	return connect.NewResponse(&distlockv1.BatchResponse{Results: results}), nil
}

// batched makes one call of a batch as the identity id.
func (h *service) batched(ctx context.Context, id auth.Identity, bc *distlockv1.BatchCall) *distlockv1.BatchResult {
	c := newCall(batchedMethod(bc))
	c.id = id
	ctx = withCall(ctx, c)
	res, err := h.runBatched(ctx, bc)
	if ended, ok := endedBy(ctx); ok && err != nil {
		err = ended
	}
	c.code = codeOf(err)
	h.s.finish(c)
	if err != nil {
		return &distlockv1.BatchResult{Result: &distlockv1.BatchResult_Error{Error: callError(err)}}
	}
	return res
}

// batchedMethod names the method of a batch's call, for the rate limit,
// the log and the metrics.
func batchedMethod(bc *distlockv1.BatchCall) string {
	switch bc.GetCall().(type) {
	case *distlockv1.BatchCall_Acquire:
		return "Acquire"
	case *distlockv1.BatchCall_Renew:
		return "Renew"
	case *distlockv1.BatchCall_Release:
		return "Release"
	}
	return "Batch"
}

// runBatched makes the call bc, after taking it from the tenant's rate.
func (h *service) runBatched(ctx context.Context, bc *distlockv1.BatchCall) (*distlockv1.BatchResult, error) {
	c := callOf(ctx)
	if err := h.s.checkRate(c.method, c.id.Tenant); err != nil {
		return nil, err
	}
	switch call := bc.GetCall().(type) {
	case *distlockv1.BatchCall_Acquire:
		m := call.Acquire
		noteKey(ctx, short(m.GetKey()))
		if m.GetWait().AsDuration() > 0 || m.GetResumes() {
			return nil, invalid("acquire %q: a batched Acquire may not wait: send it alone", m.GetKey())
		}
		res, err := h.Acquire(ctx, connect.NewRequest(m))
		if err != nil {
			return nil, err
		}
		return &distlockv1.BatchResult{Result: &distlockv1.BatchResult_Acquire{Acquire: res.Msg}}, nil
	case *distlockv1.BatchCall_Renew:
		res, err := h.Renew(ctx, connect.NewRequest(call.Renew))
		if err != nil {
			return nil, err
		}
		return &distlockv1.BatchResult{Result: &distlockv1.BatchResult_Renew{Renew: res.Msg}}, nil
	case *distlockv1.BatchCall_Release:
		res, err := h.Release(ctx, connect.NewRequest(call.Release))
		if err != nil {
			return nil, err
		}
		return &distlockv1.BatchResult{Result: &distlockv1.BatchResult_Release{Release: res.Msg}}, nil
	}
	return nil, invalid("batch: a call names no method (acquire, renew or release)")
}

// callError is err as a batch's result carries it: the code and message
// the call would have answered alone.
func callError(err error) *distlockv1.CallError {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return &distlockv1.CallError{Code: uint32(ce.Code()), Message: ce.Message()}
	}
	return &distlockv1.CallError{Code: uint32(connect.CodeUnknown), Message: err.Error()}
}
