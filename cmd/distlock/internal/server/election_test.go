package server_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/election"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// TestElection: through the service, one candidate leads and another waits
// in Campaign; Leader and Observe tell who leads, Observe the current
// leader first and then each change in term order; Resign hands over at
// once; the Go election package over the service sees the same election.
func TestElection(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store) {
		e := newEnv(t, st, server.Limits{})
		api := e.api(alphaClient)
		name := keyFor(t, "leader")
		lease := durationpb.New(30 * time.Second)
		a, err := api.Campaign(ctx(t), connect.NewRequest(&distlockv1.CampaignRequest{Name: name, Value: "10.0.0.1", Lease: lease}))
		if err != nil {
			t.Fatal(err)
		}
		if a.Msg.GetKey() != election.KeyPrefix+name || a.Msg.GetFence() == 0 {
			t.Fatalf("the first campaign: %v", a.Msg)
		}
		oc, stop := context.WithCancel(ctx(t))
		defer stop()
		obs, err := e.api(alphaViewer).Observe(oc, connect.NewRequest(&distlockv1.ObserveRequest{Name: name}))
		if err != nil {
			t.Fatal(err)
		}
		next := func(what string) *distlockv1.LeaderResponse {
			t.Helper()
			if !obs.Receive() {
				t.Fatalf("%s: the Observe stream ended: %v", what, obs.Err())
			}
			return obs.Msg().GetLeader()
		}
		if l := next("the current leader"); !l.GetHeld() || l.GetValue() != "10.0.0.1" || l.GetFence() != a.Msg.GetFence() {
			t.Fatalf("Observe's first leader: %v, want 10.0.0.1 at fence %d", l, a.Msg.GetFence())
		}
		_, err = api.Campaign(ctx(t), connect.NewRequest(&distlockv1.CampaignRequest{Name: name, Value: "10.0.0.2"}))
		wantCode(t, "a second candidate without a wait", err, connect.CodeAborted)

		second := make(chan *distlockv1.CampaignResponse, 1)
		go func() {
			res, err := api.Campaign(context.Background(), connect.NewRequest(&distlockv1.CampaignRequest{Name: name, Value: "10.0.0.2", Lease: lease, Wait: durationpb.New(20 * time.Second)}))
			if err != nil {
				t.Errorf("the waiting candidate: %v", err)
				second <- nil
				return
			}
			second <- res.Msg
		}()
		eventually(t, 10*time.Second, "the second candidate waits", func() bool { return gauge(t, e, "distlock_server_waiting") == 1 })
		l, err := api.Leader(ctx(t), connect.NewRequest(&distlockv1.LeaderRequest{Name: name}))
		if err != nil || l.Msg.GetValue() != "10.0.0.1" {
			t.Fatalf("Leader: %v, %v; want 10.0.0.1", l, err)
		}
		if _, err := api.Resign(ctx(t), connect.NewRequest(&distlockv1.ResignRequest{Name: name, Token: a.Msg.GetToken()})); err != nil {
			t.Fatalf("Resign: %v", err)
		}
		var b *distlockv1.CampaignResponse
		select {
		case b = <-second:
		case <-time.After(15 * time.Second):
			t.Fatal("the waiting candidate did not lead within 15s of a resignation")
		}
		if b == nil || b.GetFence() <= a.Msg.GetFence() {
			t.Fatalf("the second term: %v, want a fence above %d", b, a.Msg.GetFence())
		}
		// Observe sends the end of the first term and the second term, in
		// order; the end may be merged away when the handover is quick.
		for l := next("the handover"); l.GetFence() != b.GetFence() || !l.GetHeld(); l = next("the second term") {
			if l.GetHeld() || l.GetFence() != a.Msg.GetFence() {
				t.Fatalf("Observe after the resignation: %v, want the first term's end or the second term", l)
			}
		}
		if l := leaderFromGo(t, e, name); l.Value != "10.0.0.2" || l.Fence != b.GetFence() {
			t.Errorf("the Go election package over the store sees %+v, want 10.0.0.2 at fence %d", l, b.GetFence())
		}
		_, err = api.Resign(ctx(t), connect.NewRequest(&distlockv1.ResignRequest{Name: name, Token: a.Msg.GetToken()}))
		wantCode(t, "a resignation of an ended term", err, connect.CodeNotFound)
		_, err = api.Campaign(ctx(t), connect.NewRequest(&distlockv1.CampaignRequest{}))
		wantCode(t, "a campaign without a name", err, connect.CodeInvalidArgument)
		_, err = e.api(alphaViewer).Campaign(ctx(t), connect.NewRequest(&distlockv1.CampaignRequest{Name: name}))
		wantCode(t, "a viewer's campaign", err, connect.CodePermissionDenied)
	})
}

// leaderFromGo reads the election name of tenant alpha as a Go candidate
// does: with the election package, over the service (remotelock).
func leaderFromGo(t *testing.T, e *env, name string) election.Leader {
	t.Helper()
	b, err := remotelock.New(e.h2c, e.url, remotelock.WithToken(alphaViewer))
	if err != nil {
		t.Fatal(err)
	}
	c := distlock.New(b)
	defer c.Close()
	el, err := election.New(c, name)
	if err != nil {
		t.Fatal(err)
	}
	l, err := el.Leader(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
