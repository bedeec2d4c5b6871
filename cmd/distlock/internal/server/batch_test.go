package server_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// batch sends calls as one Batch and returns its results, failing the test
// unless there is one per call.
func batch(t *testing.T, api distlockv1connect.LockServiceClient, calls ...*distlockv1.BatchCall) []*distlockv1.BatchResult {
	t.Helper()
	res, err := api.Batch(ctx(t), connect.NewRequest(&distlockv1.BatchRequest{Calls: calls}))
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	if len(res.Msg.GetResults()) != len(calls) {
		t.Fatalf("batch of %d calls answered %d results", len(calls), len(res.Msg.GetResults()))
	}
	return res.Msg.GetResults()
}

func batchAcquire(m *distlockv1.AcquireRequest) *distlockv1.BatchCall {
	return &distlockv1.BatchCall{Call: &distlockv1.BatchCall_Acquire{Acquire: m}}
}

func batchRenew(key, token string) *distlockv1.BatchCall {
	return &distlockv1.BatchCall{Call: &distlockv1.BatchCall_Renew{Renew: &distlockv1.RenewRequest{Key: key, Token: token, Lease: durationpb.New(time.Minute)}}}
}

func batchRelease(key, token string) *distlockv1.BatchCall {
	return &distlockv1.BatchCall{Call: &distlockv1.BatchCall_Release{Release: &distlockv1.ReleaseRequest{Key: key, Token: token}}}
}

// wantResultCode fails the test unless r is an error of code.
func wantResultCode(t *testing.T, what string, r *distlockv1.BatchResult, code connect.Code) {
	t.Helper()
	if got := r.GetError(); got == nil || connect.Code(got.GetCode()) != code {
		t.Errorf("%s: %v, want an error of code %v", what, r, code)
	}
}

// Each call of a batch gets the answer it would get alone, as its tenant:
// grants, a held key's refusal, renewals and releases by token, and another
// tenant's token finds nothing to renew or release.
func TestBatch(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		alpha, beta := e.api(alphaClient), e.api(betaClient)
		a, b, held := keyFor(t, "a"), keyFor(t, "b"), keyFor(t, "held")
		lease := durationpb.New(time.Minute)
		acquire(t, e.api(alphaOther), &distlockv1.AcquireRequest{Key: held, Lease: lease})

		got := batch(t, alpha,
			batchAcquire(&distlockv1.AcquireRequest{Key: a, Lease: lease, Owner: "o"}),
			batchAcquire(&distlockv1.AcquireRequest{Key: b, Lease: lease}),
			batchAcquire(&distlockv1.AcquireRequest{Key: held, Lease: lease}))
		ga, gb := got[0].GetAcquire(), got[1].GetAcquire()
		if ga.GetToken() == "" || gb.GetToken() == "" || ga.GetToken() == gb.GetToken() || ga.GetFence() == 0 {
			t.Fatalf("acquisitions of two free keys answered %v and %v, want two grants", got[0], got[1])
		}
		wantResultCode(t, "acquisition of a held key", got[2], connect.CodeAborted)
		if l := inspect(t, alpha, a); !l.GetHeld() || l.GetOwner() != "o" || l.GetFence() != ga.GetFence() {
			t.Errorf("key a after its batched grant: %v, want held by o at fence %d", l, ga.GetFence())
		}

		got = batch(t, beta, batchRenew(a, ga.GetToken()), batchRelease(b, gb.GetToken()))
		wantResultCode(t, "another tenant's renewal", got[0], connect.CodeNotFound)
		wantResultCode(t, "another tenant's release", got[1], connect.CodeNotFound)

		got = batch(t, alpha, batchRenew(a, ga.GetToken()), batchRenew(b, "not-the-holders-token-0001"), batchRelease(b, gb.GetToken()))
		if got[0].GetRenew().GetExpiresAt() == nil {
			t.Errorf("renewal by the holder answered %v, want an expiry", got[0])
		}
		wantResultCode(t, "renewal by a wrong token", got[1], connect.CodeNotFound)
		if got[2].GetRelease() == nil {
			t.Errorf("release by the holder answered %v, want a release", got[2])
		}
		if l := inspect(t, alpha, b); l.GetHeld() {
			t.Errorf("key b after its batched release: %v, want free", l)
		}
		if l := inspect(t, alpha, a); !l.GetHeld() {
			t.Errorf("key a after the batches: %v, want still held", l)
		}
	})
}

// What a batch may not carry is refused and changes nothing: an Acquire
// that would wait or resume, a call naming no method, more than 128 calls,
// a batch from a role that may not write.
func TestBatchRefuses(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		key := keyFor(t, "k")
		got := batch(t, api,
			batchAcquire(&distlockv1.AcquireRequest{Key: key, Wait: durationpb.New(time.Second)}),
			batchAcquire(&distlockv1.AcquireRequest{Key: key, RequestId: "r-1", Resumes: true}),
			&distlockv1.BatchCall{},
			batchAcquire(&distlockv1.AcquireRequest{Key: ""}))
		for i, what := range []string{"an Acquire with a wait", "an Acquire that resumes", "a call naming no method", "an empty key"} {
			wantResultCode(t, what, got[i], connect.CodeInvalidArgument)
		}
		if l := inspect(t, api, key); l.GetHeld() {
			t.Errorf("key after refused calls: %v, want free", l)
		}

		calls := make([]*distlockv1.BatchCall, 129)
		for i := range calls {
			calls[i] = batchAcquire(&distlockv1.AcquireRequest{Key: key})
		}
		_, err := api.Batch(ctx(t), connect.NewRequest(&distlockv1.BatchRequest{Calls: calls}))
		wantCode(t, "a batch of 129 calls", err, connect.CodeInvalidArgument)
		_, err = e.api(alphaViewer).Batch(ctx(t), connect.NewRequest(&distlockv1.BatchRequest{Calls: calls[:1]}))
		wantCode(t, "a viewer's batch", err, connect.CodePermissionDenied)
		if l := inspect(t, api, key); l.GetHeld() {
			t.Errorf("key after refused batches: %v, want free", l)
		}
	})
}

// A batch's calls take the tenant's rate one each, so that batching is no
// way around a limit: of five calls in a burst of three, two are refused.
func TestBatchTakesTheRatePerCall(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{RatePerTenant: 0.1, Burst: 3})
		calls := make([]*distlockv1.BatchCall, 5)
		for i := range calls {
			calls[i] = batchRelease(keyFor(t, "k"), "no-such-token-00000001")
		}
		refused := 0
		for i, r := range batch(t, e.api(alphaClient), calls...) {
			switch code := connect.Code(r.GetError().GetCode()); code {
			case connect.CodeResourceExhausted:
				refused++
			case connect.CodeNotFound:
			default:
				t.Errorf("call %d: %v, want NOT_FOUND or RESOURCE_EXHAUSTED", i, r)
			}
		}
		if refused != 2 {
			t.Errorf("%d of 5 calls refused for the rate with a burst of 3, want 2", refused)
		}
		_, err := e.api(alphaClient).Batch(ctx(t), connect.NewRequest(&distlockv1.BatchRequest{Calls: calls[:1]}))
		if err != nil {
			t.Errorf("a batch over the rate: %v, want its calls refused, not the batch", err)
		}
	})
}

// A retried batch (its answer never came) is made again call by call, as a
// retried Acquire is: an acquisition with the same request id gets the
// same token and fence, and takes nothing more.
func TestBatchRetried(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		lease := durationpb.New(time.Minute)
		calls := []*distlockv1.BatchCall{
			batchAcquire(&distlockv1.AcquireRequest{Key: keyFor(t, "a"), Lease: lease, RequestId: "7d1e1b53-5b1c-4d4e-9f0e-aaaaaaaaaaaa", FirstTry: true}),
			batchAcquire(&distlockv1.AcquireRequest{Key: keyFor(t, "b"), Lease: lease, RequestId: "7d1e1b53-5b1c-4d4e-9f0e-bbbbbbbbbbbb", FirstTry: true}),
		}
		first := batch(t, api, calls...)
		for _, c := range calls {
			c.GetAcquire().FirstTry = false // a retry of a call whose answer never came
		}
		again := batch(t, api, calls...)
		for i := range calls {
			f, a := first[i].GetAcquire(), again[i].GetAcquire()
			if f.GetToken() == "" || a.GetToken() != f.GetToken() || a.GetFence() != f.GetFence() {
				t.Errorf("call %d: first %v, retried %v; want the same grant", i, first[i], again[i])
			}
		}
		if got := list(t, api, keyFor(t, "")); len(got) != 2 {
			t.Errorf("held after the retry: %v, want the two keys once each", got)
		}
	})
}
