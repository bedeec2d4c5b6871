package server_test

import (
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// Re-sending an Acquire with the same request id renews the grant it
// already has, but never past the cap of its group: while it answers the
// grant's own fence, the answered expiry stays within the cap of the first
// grant. Once the grant ended at its cap, a retry that finds the key free
// is a new hold, with a higher fence.
func TestRetriedAcquireKeepsTheCap(t *testing.T) {
	const limit = 1500 * time.Millisecond
	forEachStore(t, func(t *testing.T, st store) {
		e := cappedEnv(t, st, limit)
		api := e.api(alphaClient)
		c := ctx(t)
		req := &distlockv1.AcquireRequest{Key: "capped/retried", Lease: durationpb.New(10 * time.Second),
			RequestId: "retried-request-0001", Owner: "replica-a"}
		start := time.Now()
		first := acquire(t, api, req)
		capEnd := start.Add(limit)
		for time.Since(start) < 2*limit {
			time.Sleep(300 * time.Millisecond)
			resp, err := api.Acquire(c, connect.NewRequest(req))
			if err != nil {
				if time.Now().Before(capEnd.Add(-100 * time.Millisecond)) {
					t.Fatalf("a retry %v after the grant, within the cap: %v", time.Since(start), err)
				}
				continue // refused at or past the cap
			}
			if resp.Msg.GetFence() != first.GetFence() {
				// The first grant ended at its cap and the retry found the
				// key free: a new hold, with a fence of its own and a cap
				// of its own.
				if time.Now().Before(capEnd) || resp.Msg.GetFence() < first.GetFence() {
					t.Fatalf("a retry %v after the grant answered fence %d, want the grant's %d", time.Since(start), resp.Msg.GetFence(), first.GetFence())
				}
				break
			}
			if got := resp.Msg.GetExpiresAt().AsTime(); got.After(capEnd.Add(50 * time.Millisecond)) {
				t.Fatalf("a retry %v after the grant answered its fence with an expiry %v past its cap", time.Since(start), got.Sub(capEnd))
			}
			if resp.Msg.GetToken() != first.GetToken() {
				t.Fatalf("a retry answered token %q, want the grant's %q", resp.Msg.GetToken(), first.GetToken())
			}
		}
	})
}

// A request id makes only the same caller's retry idempotent: another owner
// or another credential sending the same id does not get the lock, its
// token or its fence, but an error that says why; the first caller's retry
// still gets its grant.
func TestRequestIDBelongsToItsCaller(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		c := ctx(t)
		req := func(owner string) *distlockv1.AcquireRequest {
			return &distlockv1.AcquireRequest{Key: "nightly-report", Lease: durationpb.New(10 * time.Second),
				RequestId: "nightly-report-2026-12-01", Owner: owner}
		}
		first := acquire(t, e.api(alphaClient), req("replica-a"))
		for _, tc := range []struct {
			name, token, owner string
		}{
			{"another owner", alphaClient, "replica-b"},
			{"another credential", alphaOther, "replica-a"},
		} {
			resp, err := e.api(tc.token).Acquire(c, connect.NewRequest(req(tc.owner)))
			if err == nil {
				t.Fatalf("%s with the same request id got token %q fence %d (the holder's: %q %d)", tc.name,
					resp.Msg.GetToken(), resp.Msg.GetFence(), first.GetToken(), first.GetFence())
			}
			wantCode(t, tc.name, err, connect.CodeFailedPrecondition)
			if !strings.Contains(err.Error(), "request_id") {
				t.Errorf("%s: error %q does not name the request id", tc.name, err)
			}
		}
		again := acquire(t, e.api(alphaClient), req("replica-a"))
		if again.GetToken() != first.GetToken() || again.GetFence() != first.GetFence() {
			t.Errorf("the first caller's retry got token %q fence %d, want %q %d", again.GetToken(), again.GetFence(), first.GetToken(), first.GetFence())
		}
	})
}
