// Package floortest checks a store's floor (a floor.Target) against a real
// store, for the tests of the tool packages that register floors.
package floortest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/storetool/floor"
)

// Run opens the floor of rawURL with cfg (by default four workers on two
// clients and a lease of 30s) and checks what bench relies on: a key taken
// by one worker is refused to another with distlock.ErrNotAcquired until
// its release; every worker at once on a few keys gets no other error; and
// Close frees everything.
func Run(t *testing.T, rawURL string, cfg floor.Config) {
	t.Helper()
	if cfg.Workers == 0 {
		cfg.Workers, cfg.Clients = 4, 2
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := floor.Open(ctx, rawURL, cfg)
	if err != nil {
		t.Fatalf("floor.Open(%s): %v", rawURL, err)
	}
	defer func() {
		if err := f.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	key := "floortest/" + t.Name()
	release, err := f.Lock(ctx, 0, key)
	if err != nil {
		t.Fatalf("worker 0 takes a free key: %v", err)
	}
	if _, err := f.Lock(ctx, 1, key); !errors.Is(err, distlock.ErrNotAcquired) {
		t.Errorf("worker 1 takes a held key: %v, want ErrNotAcquired", err)
	}
	if err := release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if release, err = f.Lock(ctx, 1, key); err != nil {
		t.Fatalf("worker 1 takes the released key: %v", err)
	}
	if err := release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}

	const attempts = 50
	acquired := make([]int, cfg.Workers)
	errs := make([]error, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() {
			for i := range attempts {
				release, err := f.Lock(ctx, w, key+"/"+strconv.Itoa(i%3))
				if errors.Is(err, distlock.ErrNotAcquired) {
					continue
				}
				if err == nil {
					err = release(ctx)
				}
				if err != nil {
					errs[w] = err
					return
				}
				acquired[w]++
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("workers at once: %v", err)
	}
	total := 0
	for _, n := range acquired {
		total += n
	}
	if total == 0 {
		t.Errorf("%d workers made %d attempts each and took no lock", cfg.Workers, attempts)
	}
}
