package cli

import (
	"context"
	"testing"
	"time"

	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/storetool/migrate"
)

// distlock serve --backend nats://... serves locks kept in a JetStream
// Key-Value bucket that distlock migrate made: a held key is refused to a
// second caller, renewed, inspected with its fence and released.
func TestServeNATS(t *testing.T) {
	backend := testserver.NATSURL(testserver.NATS(t)) + "?bucket=locks"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := migrate.Run(ctx, backend); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, nil, "--insecure-no-auth", "--listen", "127.0.0.1:0", "--backend", backend)
	a := apiOf(p, "")
	got := mustOK(t, "Acquire", a.call(ctx, "Acquire", map[string]any{"key": "demo/é", "lease": "30s", "owner": "test"}))
	token, fence := got.str("token"), got.str("fence")
	if token == "" || fence == "" || fence == "0" {
		t.Fatalf("Acquire: token %q fence %q", token, fence)
	}
	wantCode(t, "a second Acquire", a.call(ctx, "Acquire", map[string]any{"key": "demo/é"}), "aborted")
	mustOK(t, "Renew", a.call(ctx, "Renew", map[string]any{"key": "demo/é", "token": token, "lease": "20s"}))
	in := mustOK(t, "Inspect", a.call(ctx, "Inspect", map[string]any{"key": "demo/é"}))
	if lock, _ := in.body["lock"].(map[string]any); lock["held"] != true || lock["owner"] != "test" || lock["fence"] != fence {
		t.Errorf("Inspect: %v; want held by test with fence %s", in.body, fence)
	}
	mustOK(t, "Release", a.call(ctx, "Release", map[string]any{"key": "demo/é", "token": token}))
	if code := p.stop(); code != 0 {
		t.Errorf("serve exited %d; stderr:\n%s", code, p.stderr.String())
	}
}
