package cli

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/locktest"
)

// TestServeConformance runs the deployment part of the conformance suite
// (locktest.RunTopology) through the Go client (remotelock) against the
// distlock binary serving on its default store, the embedded etcd, as a user
// starts it; the server package runs the whole suite through the same
// service over etcd. The binary is built without the race detector
// (buildDistlock), which slows etcd's server several times over: the suite
// would time the detector, not the service.
func TestServeConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the distlock binary and runs the lock service")
	}
	bin := buildDistlock(t)
	args := []string{"serve", "-o", "json", "--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", t.TempDir()}
	p := startServeCmd(t, exec.Command(bin, args...), args)
	defer func() {
		if code := p.stop(); code != 0 {
			t.Errorf("serve exited with %d; stderr:\n%s", code, p.stderr.String())
		}
	}()
	newBackend := func(t testing.TB) driver.Backend {
		b, err := remotelock.New(nil, p.banner.URL)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	admin := distlock.New(newBackend(t)) // --insecure-no-auth: every call may administer
	defer admin.Close()
	locktest.RunTopology(t, locktest.Harness{
		NewBackend: newBackend,
		DeleteKey: func(t testing.TB, key string) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := admin.ForceRelease(ctx, key, "test: deleted behind the holder's back"); err != nil {
				t.Fatalf("delete %q: %v", key, err)
			}
		},
		MaxKeyLen: server.DefaultMaxKeyLen,
	})
}
