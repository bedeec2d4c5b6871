// Package floortest checks a store's floor (a floor.Target) against a real
// store, for the tests of the tool packages that register floors.
package floortest

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
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

// Refused asserts that parse, a backend's ParseURL, refuses each of urls,
// and that floor.Open refuses it too, with an error matching
// driver.ErrInvalidOption that carries parse's message: the floor and
// distlock.Open refuse the same URLs, in the same words. The URLs should
// name a store that does not listen, so that a URL the floor does not
// refuse fails differently.
func Refused[C any](t *testing.T, parse func(*url.URL) (C, error), urls ...string) {
	t.Helper()
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		_, want := parse(u)
		if want == nil {
			t.Errorf("the backend accepts %q", raw)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		f, err := floor.Open(ctx, raw, floor.Config{Workers: 1, Clients: 1, Lease: time.Second})
		cancel()
		if err == nil {
			_ = f.Close()
		}
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), want.Error()) {
			t.Errorf("floor.Open(%q) = %v, want the backend's %q", raw, err, want)
		}
	}
}
