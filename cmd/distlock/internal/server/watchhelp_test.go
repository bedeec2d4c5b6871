package server_test

import (
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
	"github.com/distlock/distlock/gen/distlock/v1/distlockv1connect"
)

// awaitLive returns once a Watch feeding events reports changes: a stream
// sends nothing before its first event, so the test acquires and releases
// probe (which must be under the watched prefix) until the stream reports
// the grant.
func awaitLive(t *testing.T, api distlockv1connect.LockServiceClient, events <-chan *distlockv1.Event, probe string) {
	t.Helper()
	for range 50 {
		res := acquire(t, api, &distlockv1.AcquireRequest{Key: probe, Lease: durationpb.New(5 * time.Second)})
		if _, err := api.Release(ctx(t), connect.NewRequest(&distlockv1.ReleaseRequest{Key: probe, Token: res.GetToken()})); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(200 * time.Millisecond)
		for waiting := true; waiting; {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatal("the watch ended before it was live")
				}
				if ev.GetLock().GetKey() == probe && ev.GetType() == distlockv1.Event_TYPE_ACQUIRED {
					return
				}
			case <-timeout:
				waiting = false
			}
		}
	}
	t.Fatal("the watch reported no probe within 50 tries")
}

// nextEvent returns the next event about key, skipping others, within 10s.
func nextEvent(t *testing.T, events <-chan *distlockv1.Event, key string) *distlockv1.Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the watch ended before an event about %q", key)
			}
			if ev.GetLock().GetKey() == key {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event about %q within 10s", key)
		}
	}
}
