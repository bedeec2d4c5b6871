package server_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/distlock/distlock/cmd/distlock/internal/server"
)

// TestReadyProbesShareStoreReads: anyone may ask /readyz (and the health
// Check), so 200 asks at once, and more within a second, make at most a
// few probes of the store, not one each; the answer still follows the
// store within about a second.
func TestReadyProbesShareStoreReads(t *testing.T) {
	var probes atomic.Int64
	var down atomic.Bool
	e := newEnvConfig(t, server.Config{Client: stores(t)[0].open(t), Ready: func(ctx context.Context) error {
		probes.Add(1)
		time.Sleep(20 * time.Millisecond) // a store's round trip
		if down.Load() {
			return context.DeadlineExceeded
		}
		return nil
	}})
	ask := func() int {
		code, _ := get(t, e, "/readyz")
		return code
	}
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			if code := ask(); code != http.StatusOK {
				t.Errorf("/readyz: %d, want 200", code)
			}
		})
	}
	wg.Wait()
	if n := probes.Load(); n > 5 {
		t.Errorf("200 asks made %d probes of the store, want a few", n)
	}
	down.Store(true)
	eventually(t, 3*time.Second, "/readyz to follow the store down", func() bool { return ask() == http.StatusServiceUnavailable })
}
