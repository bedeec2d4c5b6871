package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	distlockv1 "github.com/distlock/distlock/gen/distlock/v1"
)

// A token removed from the keyring, or given a role that no longer allows
// a call, keeps nothing open: its Watch streams and Acquire waits end at
// once, while the calls of other tokens go on.
func TestRemovedTokenEndsItsCalls(t *testing.T) {
	e := newEnv(t, stores(t)[1], server.Limits{})
	prefix := keyFor(t, "")
	held := acquire(t, e.api(alphaOther), &distlockv1.AcquireRequest{Key: prefix + "held", Lease: durationpb.New(time.Minute)})

	_, removedWatch := watch(t, e.api(alphaClient), prefix)
	viewerEvents, _ := watch(t, e.api(alphaViewer), prefix)
	otherEvents, _ := watch(t, e.api(alphaOther), prefix)
	waits := make(chan error, 1)
	go func() {
		_, err := e.api(alphaClient).Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{
			Key: prefix + "held", Wait: durationpb.New(30 * time.Second)}))
		waits <- err
	}()
	time.Sleep(200 * time.Millisecond) // the wait has begun

	// alphaClient's token goes.
	setKeys(t, e, strings.ReplaceAll(tokenFile, alphaClient+" alpha client\n", ""))
	wantCode(t, "the removed token's watch", removedWatch(), connect.CodeUnauthenticated)
	select {
	case err := <-waits:
		wantCode(t, "the removed token's wait", err, connect.CodeUnauthenticated)
	case <-time.After(5 * time.Second):
		t.Fatal("the removed token's wait went on")
	}
	_, err := e.api(alphaClient).Inspect(ctx(t), connect.NewRequest(&distlockv1.InspectRequest{Key: prefix + "held"}))
	wantCode(t, "a new call of the removed token", err, connect.CodeUnauthenticated)

	// alphaOther becomes a viewer: its watch may go on, its writes may not.
	setKeys(t, e, strings.ReplaceAll(strings.ReplaceAll(tokenFile, alphaClient+" alpha client\n", ""),
		alphaOther+" alpha client", alphaOther+" alpha viewer"))
	_, err = e.api(alphaOther).Renew(ctx(t), connect.NewRequest(&distlockv1.RenewRequest{
		Key: prefix + "held", Token: held.GetToken(), Lease: durationpb.New(time.Minute)}))
	wantCode(t, "a write of a token now a viewer", err, connect.CodePermissionDenied)
	// The streams of tokens that may still read go on: they see a grant
	// made after the reloads.
	l, err := e.client.TryLock(ctx(t), "tenants/alpha/"+prefix+"new")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Release(ctx(t)) }()
	for name, events := range map[string]<-chan *distlockv1.Event{"the viewer's watch": viewerEvents, "the demoted token's watch": otherEvents} {
		if !sawGrant(events, prefix+"new", 5*time.Second) {
			t.Errorf("%s did not report the grant: it ended, or missed it", name)
		}
	}
}

// setKeys gives e's server the keyring of a token file's content.
func setKeys(t *testing.T, e *env, content string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	e.srv.SetKeys(keys)
}

// sawGrant reports whether events has the grant of key within d.
func sawGrant(events <-chan *distlockv1.Event, key string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return false
			}
			if ev.GetType() == distlockv1.Event_TYPE_ACQUIRED && ev.GetLock().GetKey() == key {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// A Watch stream ends at its lifetime with Unavailable, which clients take
// as the cue to open it again, authenticated anew.
func TestWatchLifetime(t *testing.T) {
	e := newEnv(t, stores(t)[1], server.Limits{MaxStreamLifetime: 300 * time.Millisecond})
	_, end := watch(t, e.api(alphaClient), keyFor(t, ""))
	err := end()
	wantCode(t, "a watch past its lifetime", err, connect.CodeUnavailable)
	if err == nil || !strings.Contains(err.Error(), "lifetime of 300ms") {
		t.Errorf("a watch past its lifetime: %v, want it to name the lifetime", err)
	}
}

// One tenant cannot hold more waits or streams open than its caps, which
// leave the other tenants theirs; a slot comes back when its call ends.
func TestTenantCaps(t *testing.T) {
	e := newEnv(t, stores(t)[1], server.Limits{MaxWaitersPerTenant: 2, MaxStreamsPerTenant: 2})
	prefix := keyFor(t, "")
	acquire(t, e.api(alphaOther), &distlockv1.AcquireRequest{Key: prefix + "held", Lease: durationpb.New(time.Minute)})
	acquire(t, e.api(betaClient), &distlockv1.AcquireRequest{Key: prefix + "held", Lease: durationpb.New(time.Minute)})
	wait := func(ctx context.Context, token string) error {
		_, err := e.api(token).Acquire(ctx, connect.NewRequest(&distlockv1.AcquireRequest{
			Key: prefix + "held", Wait: durationpb.New(30 * time.Second)}))
		return err
	}

	waitCtx, stopWaits := context.WithCancel(ctx(t))
	defer stopWaits()
	var waits sync.WaitGroup
	for range 2 {
		waits.Go(func() { _ = wait(waitCtx, alphaClient) })
	}
	eventually(t, 10*time.Second, "two waits", func() bool { return gauge(t, e, "distlock_server_waiting") == 2 })
	err := wait(ctx(t), alphaClient)
	wantCode(t, "a third wait of one tenant", err, connect.CodeResourceExhausted)
	if err == nil || !strings.Contains(err.Error(), `tenant "alpha" has 2 waiting Acquire calls open`) {
		t.Errorf("a third wait: %v, want it to name the cap", err)
	}
	// Another tenant still waits, and a try of the capped one still tries.
	betaCtx, stopBeta := context.WithTimeout(ctx(t), 300*time.Millisecond)
	defer stopBeta()
	wantCode(t, "the other tenant's wait", wait(betaCtx, betaClient), connect.CodeAborted) // it waited, in vain
	_, err = e.api(alphaClient).Acquire(ctx(t), connect.NewRequest(&distlockv1.AcquireRequest{Key: prefix + "free"}))
	if err != nil {
		t.Errorf("a try of the capped tenant: %v", err)
	}
	stopWaits()
	waits.Wait()
	eventually(t, 10*time.Second, "the waits' slots back", func() bool {
		ctx, cancel := context.WithTimeout(ctx(t), 100*time.Millisecond)
		defer cancel()
		return connect.CodeOf(wait(ctx, alphaClient)) == connect.CodeAborted
	})

	watch(t, e.api(alphaClient), prefix)
	watch(t, e.api(alphaViewer), prefix)
	stream, err := e.api(alphaClient).Watch(ctx(t), connect.NewRequest(&distlockv1.WatchRequest{Prefix: prefix}))
	if err == nil {
		stream.Receive()
		err = stream.Err()
		_ = stream.Close()
	}
	wantCode(t, "a third stream of one tenant", err, connect.CodeResourceExhausted)
	watch(t, e.api(betaClient), prefix) // another tenant's stream opens
}
