package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

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
