package cli

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestServeRestart stops the service (SIGTERM) and starts it again on the
// same data dir and port while a client holds a lock and renews it every
// second: the client's Renew fails only while the service is down, and
// succeeds after the restart; the lock keeps its fence; and another
// client, trying to take the key all along, never gets it.
func TestServeRestart(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	dir := filepath.Join(t.TempDir(), "state")
	args := []string{"--insecure-no-auth", "--data-dir", dir}
	p := startServe(t, nil, append(args, "--listen", "127.0.0.1:0")...)
	listen := p.banner.Listen
	a := apiOf(p, "")
	a.hc.Timeout = 3 * time.Second
	got := mustOK(t, "Acquire", a.call(ctx, "Acquire", map[string]any{"key": "restart", "lease": "5s", "owner": "holder"}))
	token, fence := got.str("token"), got.str("fence")

	var (
		mu        sync.Mutex
		renewals  []string // "ok" or the code of each Renew, in order
		stolen    []string // Acquires by the other client that succeeded
		attempts  int      // Acquires by the other client
		restarted = make(chan struct{})
		okAfter   int // successful renewals after the restart
	)
	loopCtx, stopLoops := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { // the holder: Renew every second
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-tick.C:
			}
			r := a.call(loopCtx, "Renew", map[string]any{"key": "restart", "token": token})
			mu.Lock()
			switch {
			case r.code == "":
				renewals = append(renewals, "ok")
				select {
				case <-restarted:
					okAfter++
				default:
				}
			default:
				renewals = append(renewals, r.code)
			}
			mu.Unlock()
		}
	})
	wg.Go(func() { // another client: try to take the key all along
		for loopCtx.Err() == nil {
			r := a.call(loopCtx, "Acquire", map[string]any{"key": "restart", "lease": "5s", "owner": "thief"})
			mu.Lock()
			attempts++
			if r.code == "" {
				stolen = append(stolen, r.str("fence"))
			}
			mu.Unlock()
			select {
			case <-loopCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	})

	renewed := func(n int) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			c := 0
			for _, r := range renewals {
				if r == "ok" {
					c++
				}
			}
			return c >= n
		}
	}
	if !waitFor(10*time.Second, renewed(2)) {
		stopLoops()
		wg.Wait()
		t.Fatalf("no two renewals before the restart: %v", renewals)
	}
	if code := p.stop(); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, p.stderr.String())
	}
	time.Sleep(1500 * time.Millisecond) // a Renew or two finds the service down
	p2 := startServe(t, nil, append(args, "--listen", listen)...)
	close(restarted)
	ok := waitFor(20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return okAfter >= 2
	})
	stopLoops()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("renewals: %v; the other client tried %d times", renewals, attempts)
	if !ok {
		t.Fatalf("the holder's Renew did not succeed twice after the restart: %v; stderr:\n%s", renewals, p2.stderr.String())
	}
	if len(stolen) > 0 {
		t.Errorf("another client took the lock (fences %v) while the holder renewed it", stolen)
	}
	if attempts < 5 {
		t.Errorf("the other client tried only %d times", attempts)
	}
	for _, r := range renewals {
		if r != "ok" && r != "transport" && r != "unavailable" {
			t.Errorf("a Renew failed with %q: only the outage may fail one (renewals %v)", r, renewals)
		}
	}
	in := mustOK(t, "Inspect", apiOf(p2, "").call(ctx, "Inspect", map[string]any{"key": "restart"}))
	if lock, _ := in.body["lock"].(map[string]any); lock["held"] != true || lock["fence"] != fence || lock["owner"] != "holder" {
		t.Errorf("after the restart: %v; want held by holder with fence %s", in.body, fence)
	}
	mustOK(t, "Release", apiOf(p2, "").call(ctx, "Release", map[string]any{"key": "restart", "token": token}))
}

// TestServeShutdownWhileWaiting sends SIGTERM while an Acquire waits for a
// held key: the waiter gets UNAVAILABLE at once, the service exits 0, and
// the holder's lock is still in the store: a new service on the same data
// dir reports it, with its fence, and renews it for its token.
func TestServeShutdownWhileWaiting(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	dir := filepath.Join(t.TempDir(), "state")
	args := []string{"--insecure-no-auth", "--listen", "127.0.0.1:0", "--data-dir", dir}
	p := startServe(t, nil, args...)
	a := apiOf(p, "")
	held := mustOK(t, "Acquire", a.call(ctx, "Acquire", map[string]any{"key": "busy", "lease": "60s", "owner": "holder"}))

	type outcome struct {
		r       reply
		elapsed time.Duration
	}
	waited := make(chan outcome, 1)
	go func() {
		start := time.Now()
		r := a.call(ctx, "Acquire", map[string]any{"key": "busy", "wait": "50s", "owner": "waiter"})
		waited <- outcome{r, time.Since(start)}
	}()
	hc := &http.Client{Timeout: 10 * time.Second}
	if !waitFor(20*time.Second, func() bool {
		_, m := get(t, hc, p.banner.Metrics)
		return strings.Contains(m, "distlock_server_waiting 1")
	}) {
		t.Fatal("the waiter is not waiting after 20s")
	}
	sent := time.Now()
	p.signal(syscall.SIGTERM)
	var w outcome
	select {
	case w = <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter still waits 30s after SIGTERM")
	}
	if w.r.code != "unavailable" {
		t.Errorf("the waiter got %q (%s), want unavailable", w.r.code, w.r.msg)
	}
	if d := time.Since(sent); d > 10*time.Second {
		t.Errorf("the waiter's answer came %v after SIGTERM", d)
	}
	if code := p.wait(processTimeout); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr:\n%s", code, p.stderr.String())
	}

	p2 := startServe(t, nil, args...)
	a2 := apiOf(p2, "")
	in := mustOK(t, "Inspect", a2.call(ctx, "Inspect", map[string]any{"key": "busy"}))
	if lock, _ := in.body["lock"].(map[string]any); lock["held"] != true || lock["owner"] != "holder" || lock["fence"] != held.str("fence") {
		t.Errorf("after the shutdown: %v; want held by holder with fence %s", in.body, held.str("fence"))
	}
	mustOK(t, "Renew after the restart", a2.call(ctx, "Renew", map[string]any{"key": "busy", "token": held.str("token")}))
	mustOK(t, "Release", a2.call(ctx, "Release", map[string]any{"key": "busy", "token": held.str("token")}))
	if code := p2.stop(); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}
