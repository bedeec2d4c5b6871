package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/cmd/distlock/internal/embedetcd"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// acquireRW takes a hold of a read-write lock or fails t.
func acquireRW(t *testing.T, api distlockv1connect.LockServiceClient, req *distlockv1.AcquireRWRequest) *distlockv1.AcquireRWResponse {
	t.Helper()
	res, err := api.AcquireRW(ctx(t), connect.NewRequest(req))
	if err != nil {
		t.Fatalf("AcquireRW %q (write %v): %v", req.GetName(), req.GetWrite(), err)
	}
	return res.Msg
}

// TestRWLocks: over the service, readers share a read-write lock, a writer
// is refused while they hold it, a waiting writer keeps new readers out and
// gets the lock when they leave, with a fence above theirs; holds are
// renewed and released by token; another tenant sees nothing of it; a
// viewer may inspect it but not take it.
func TestRWLocks(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "table")
		minute := durationpb.New(time.Minute)
		r1 := acquireRW(t, api, &distlockv1.AcquireRWRequest{Name: name, Lease: minute, Owner: "reader-1"})
		r2 := acquireRW(t, api, &distlockv1.AcquireRWRequest{Name: name, Lease: minute})
		_, err := api.AcquireRW(ctx(t), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: name, Write: true}))
		wantCode(t, "a writer while readers hold", err, connect.CodeAborted)

		writer := make(chan *distlockv1.AcquireRWResponse, 1)
		go func() {
			res, err := api.AcquireRW(context.Background(), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: name, Write: true, Wait: durationpb.New(20 * time.Second)}))
			if err != nil {
				t.Errorf("the waiting writer: %v", err)
				writer <- nil
				return
			}
			writer <- res.Msg
		}()
		viewer := e.api(alphaViewer)
		eventually(t, 10*time.Second, "the writer's wait to keep readers out", func() bool {
			info, err := viewer.InspectRW(ctx(t), connect.NewRequest(&distlockv1.InspectRWRequest{Name: name}))
			return err == nil && info.Msg.GetWritersWaiting() > 0
		})
		_, err = api.AcquireRW(ctx(t), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: name}))
		wantCode(t, "a new reader while a writer waits", err, connect.CodeAborted)
		info, err := viewer.InspectRW(ctx(t), connect.NewRequest(&distlockv1.InspectRWRequest{Name: name}))
		if err != nil || info.Msg.GetWriter() || len(info.Msg.GetHeld()) != 2 {
			t.Fatalf("InspectRW with two readers: %v, %v", info, err)
		}
		if _, err := api.RenewRW(ctx(t), connect.NewRequest(&distlockv1.RenewRWRequest{Name: name, Token: r1.GetToken()})); err != nil {
			t.Fatalf("RenewRW: %v", err)
		}
		for _, r := range []*distlockv1.AcquireRWResponse{r1, r2} {
			if _, err := api.ReleaseRW(ctx(t), connect.NewRequest(&distlockv1.ReleaseRWRequest{Name: name, Token: r.GetToken()})); err != nil {
				t.Fatalf("ReleaseRW: %v", err)
			}
		}
		var w *distlockv1.AcquireRWResponse
		select {
		case w = <-writer:
		case <-time.After(15 * time.Second):
			t.Fatal("the writer got no hold within 15s of the readers' release")
		}
		if w == nil {
			t.FailNow()
		}
		if w.GetFence() <= max(r1.GetFence(), r2.GetFence()) {
			t.Errorf("the writer's fence %d, want above the readers' %d and %d", w.GetFence(), r1.GetFence(), r2.GetFence())
		}
		info, err = viewer.InspectRW(ctx(t), connect.NewRequest(&distlockv1.InspectRWRequest{Name: name}))
		if err != nil || !info.Msg.GetWriter() || len(info.Msg.GetHeld()) != 1 || info.Msg.GetHeld()[0].GetFence() != w.GetFence() {
			t.Errorf("InspectRW with the writer in: %v, %v", info, err)
		}
		_, err = api.ReleaseRW(ctx(t), connect.NewRequest(&distlockv1.ReleaseRWRequest{Name: name, Token: r1.GetToken()}))
		wantCode(t, "a released reader's second release", err, connect.CodeNotFound)
		other, err := e.api(betaClient).InspectRW(ctx(t), connect.NewRequest(&distlockv1.InspectRWRequest{Name: name}))
		if err != nil || len(other.Msg.GetHeld()) != 0 {
			t.Errorf("another tenant's InspectRW of the name: %v, %v; want nothing", other, err)
		}
		_, err = viewer.AcquireRW(ctx(t), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: name}))
		wantCode(t, "a viewer's AcquireRW", err, connect.CodePermissionDenied)
		if _, err := api.ReleaseRW(ctx(t), connect.NewRequest(&distlockv1.ReleaseRWRequest{Name: name, Token: w.GetToken()})); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRWRetry: a retried AcquireRW with the same request id gets the same
// hold, and takes no second one.
func TestRWRetry(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "table")
		req := &distlockv1.AcquireRWRequest{Name: name, RequestId: "c4a1e2d3-5b6f-4a7e-9c8d-0f1e2d3c4b5a"}
		first := acquireRW(t, api, req)
		again := acquireRW(t, api, req)
		if again.GetToken() != first.GetToken() || again.GetFence() != first.GetFence() {
			t.Fatalf("a retry: %v, want the first grant %v", again, first)
		}
		info, err := api.InspectRW(ctx(t), connect.NewRequest(&distlockv1.InspectRWRequest{Name: name}))
		if err != nil || len(info.Msg.GetHeld()) != 1 {
			t.Fatalf("after a retry: %v, %v; want one hold", info, err)
		}
	})
}

// TestRWBadInput: an intent on a reader's attempt, an intent of bad
// characters or length, and a withdrawal without one are refused with
// InvalidArgument before any store call.
func TestRWBadInput(t *testing.T) {
	e := newEnv(t, stores(t)[0], server.Limits{})
	api := e.api(alphaClient)
	for what, call := range map[string]func() error{
		"a reader's intent": func() error {
			_, err := api.AcquireRW(ctx(t), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: "rw", Intent: "i1"}))
			return err
		},
		"an intent with a slash": func() error {
			_, err := api.AcquireRW(ctx(t), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: "rw", Write: true, Intent: "a/b"}))
			return err
		},
		"an intent of 129 bytes": func() error {
			_, err := api.AcquireRW(ctx(t), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: "rw", Write: true, Intent: strings.Repeat("i", 129)}))
			return err
		},
		"a withdrawal without an intent": func() error {
			_, err := api.WithdrawIntent(ctx(t), connect.NewRequest(&distlockv1.WithdrawIntentRequest{Name: "rw"}))
			return err
		},
		"no token": func() error {
			_, err := api.RenewRW(ctx(t), connect.NewRequest(&distlockv1.RenewRWRequest{Name: "rw"}))
			return err
		},
	} {
		wantCode(t, what, call(), connect.CodeInvalidArgument)
	}
	info, err := api.InspectRW(ctx(t), connect.NewRequest(&distlockv1.InspectRWRequest{Name: "rw"}))
	if err != nil || len(info.Msg.GetHeld()) != 0 || info.Msg.GetWritersWaiting() != 0 {
		t.Errorf("after the refusals: %v, %v; want the lock untouched", info, err)
	}
}

// TestDowngradeRW: over the service, the writer's hold becomes a reader's
// with its fence: a reader then joins it, a writer is still refused, and
// the hold renews and releases by its token. Another tenant's call with
// the token, a viewer's, an empty token and a token that holds nothing are
// refused and change nothing.
func TestDowngradeRW(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "table")
		w := acquireRW(t, api, &distlockv1.AcquireRWRequest{Name: name, Write: true, Lease: durationpb.New(time.Minute)})
		downgrade := func(api distlockv1connect.LockServiceClient, token string) error {
			_, err := api.DowngradeRW(ctx(t), connect.NewRequest(&distlockv1.DowngradeRWRequest{Name: name, Token: token}))
			return err
		}
		wantCode(t, "another tenant's downgrade", downgrade(e.api(betaClient), w.GetToken()), connect.CodeNotFound)
		wantCode(t, "a viewer's downgrade", downgrade(e.api(alphaViewer), w.GetToken()), connect.CodePermissionDenied)
		wantCode(t, "a downgrade without a token", downgrade(api, ""), connect.CodeInvalidArgument)
		wantCode(t, "a downgrade of a token that holds nothing", downgrade(api, "no-such-token-0000000000000001"), connect.CodeNotFound)
		info, err := api.InspectRW(ctx(t), connect.NewRequest(&distlockv1.InspectRWRequest{Name: name}))
		if err != nil || !info.Msg.GetWriter() {
			t.Fatalf("InspectRW after refused downgrades = %v, %v; want the writer", info, err)
		}

		if err := downgrade(api, w.GetToken()); err != nil {
			t.Fatalf("DowngradeRW: %v", err)
		}
		r := acquireRW(t, api, &distlockv1.AcquireRWRequest{Name: name, Lease: durationpb.New(time.Minute)})
		_, err = api.AcquireRW(ctx(t), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: name, Write: true}))
		wantCode(t, "a writer beside the downgraded hold", err, connect.CodeAborted)
		info, err = api.InspectRW(ctx(t), connect.NewRequest(&distlockv1.InspectRWRequest{Name: name}))
		if err != nil || info.Msg.GetWriter() || len(info.Msg.GetHeld()) != 2 {
			t.Fatalf("InspectRW after the downgrade = %v, %v; want two readers", info, err)
		}
		fences := []uint64{info.Msg.GetHeld()[0].GetFence(), info.Msg.GetHeld()[1].GetFence()}
		if !slices.Contains(fences, w.GetFence()) {
			t.Errorf("the holds' fences %v lack the writer's %d", fences, w.GetFence())
		}
		if _, err := api.RenewRW(ctx(t), connect.NewRequest(&distlockv1.RenewRWRequest{Name: name, Token: w.GetToken()})); err != nil {
			t.Errorf("RenewRW of the downgraded hold: %v", err)
		}
		for _, token := range []string{w.GetToken(), r.GetToken()} {
			if _, err := api.ReleaseRW(ctx(t), connect.NewRequest(&distlockv1.ReleaseRWRequest{Name: name, Token: token})); err != nil {
				t.Errorf("ReleaseRW: %v", err)
			}
		}
		acquireRW(t, api, &distlockv1.AcquireRWRequest{Name: name, Write: true, Lease: durationpb.New(time.Minute)})
	})
}

// TestIntentOfAGoneCallEnds: a writer that waits by calls of its own gives
// up: it withdraws its intent and cuts its call, in either order. The cut
// call's wait, still running in the server until it sees the caller gone,
// renews the intent with each attempt; it must not leave it behind: a
// reader gets in well before the intent's 2 s would end.
func TestIntentOfAGoneCallEnds(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "table")
		r := acquireRW(t, api, &distlockv1.AcquireRWRequest{Name: name, Lease: durationpb.New(time.Minute)})
		cctx, cut := context.WithCancel(ctx(t))
		defer time.AfterFunc(300*time.Millisecond, cut).Stop()
		withdrawn := time.AfterFunc(250*time.Millisecond, func() {
			if _, err := api.WithdrawIntent(ctx(t), connect.NewRequest(&distlockv1.WithdrawIntentRequest{Name: name, Intent: "writer-gone"})); err != nil {
				t.Error(err)
			}
		})
		defer withdrawn.Stop()
		_, err := api.AcquireRW(cctx, connect.NewRequest(&distlockv1.AcquireRWRequest{Name: name, Write: true,
			Intent: "writer-gone", Wait: durationpb.New(5 * time.Second)}))
		wantCode(t, "the cut writer's call", err, connect.CodeCanceled)
		if _, err := api.ReleaseRW(ctx(t), connect.NewRequest(&distlockv1.ReleaseRWRequest{Name: name, Token: r.GetToken()})); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for {
			_, err := api.AcquireRW(ctx(t), connect.NewRequest(&distlockv1.AcquireRWRequest{Name: name, Lease: durationpb.New(time.Minute)}))
			if err == nil {
				break
			}
			wantCode(t, "a reader after the writer gave up", err, connect.CodeAborted)
			if time.Since(start) > 1500*time.Millisecond {
				t.Fatalf("readers still kept out %v after the writer withdrew its intent", time.Since(start))
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// TestWaitEndsAsAbortedOnTheEmbeddedStore: over serve's default store,
// whose backend calls etcd inside the process, an attempt that the wait's
// deadline cuts short comes back as etcd's "request timed out", not as the
// context's deadline. A wait that ends so must still answer ABORTED (the
// key stayed held), not UNAVAILABLE. 40 short waits of a writer behind a
// reader, with and without an intent.
func TestWaitEndsAsAbortedOnTheEmbeddedStore(t *testing.T) {
	e, err := embedetcd.Start(ctx(t), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	b, err := e.Backend(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	env := newEnvClient(t, distlock.New(b), server.Limits{})
	api := env.api(alphaClient)
	name := keyFor(t, "table")
	acquireRW(t, api, &distlockv1.AcquireRWRequest{Name: name, Lease: durationpb.New(time.Minute)})
	for i := range 40 {
		req := &distlockv1.AcquireRWRequest{Name: name, Write: true, Wait: durationpb.New(time.Duration(20+i%5*10) * time.Millisecond)}
		if i%2 == 0 {
			req.Intent = fmt.Sprintf("writer-%d", i)
		}
		_, err := api.AcquireRW(ctx(t), connect.NewRequest(req))
		wantCode(t, fmt.Sprintf("wait %d of a writer behind a reader", i), err, connect.CodeAborted)
	}
}
