package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
)

// ErrNoFloor means --floor was asked of a store whose raw commands the tool
// does not know.
var ErrNoFloor = errors.New("bench: no floor for this store")

// floorNS prefixes every key the floor writes, apart from the locks' own.
const floorNS = "distlock-bench-floor/"

// floorOpener opens a store's raw commands on cfg.Clients connections.
// first is the distlock side's first client, for an in-process store.
type floorOpener func(ctx context.Context, u *url.URL, cfg Config, first *distlock.Client) (target, error)

// floors are the stores whose raw commands the floor knows, by URL scheme.
var floors = map[string]floorOpener{
	"mem":        openMemFloor,
	"redis":      openRedisFloor,
	"rediss":     openRedisFloor,
	"postgres":   openPostgresFloor,
	"postgresql": openPostgresFloor,
	"etcd":       openEtcdFloor,
	"zk":         openZooKeeperFloor,
}

// FloorSchemes returns the URL schemes whose floor the tool knows, sorted.
func FloorSchemes() []string {
	s := make([]string, 0, len(floors))
	for k := range floors {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// CheckFloor reports whether the floor of the store at rawURL is known,
// without touching the store.
func CheckFloor(rawURL string) error {
	_, _, err := floorOf(rawURL)
	return err
}

// floorOf returns the parsed URL and the floor opener of rawURL.
func floorOf(rawURL string) (*url.URL, floorOpener, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %q is not a URL", ErrNoFloor, redact(rawURL))
	}
	open, ok := floors[u.Scheme]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %q (the floor is known for %s)", ErrNoFloor, u.Scheme+"://", strings.Join(FloorSchemes(), ", "))
	}
	return u, open, nil
}

// openFloor opens the floor of cfg.URL.
func openFloor(ctx context.Context, cfg Config, first *distlock.Client) (target, error) {
	u, open, err := floorOf(cfg.URL)
	if err != nil {
		return nil, err
	}
	t, err := open(ctx, u, cfg, first)
	if err != nil {
		return nil, fmt.Errorf("bench: open the floor of %s: %w", driver.RedactURL(u), err)
	}
	return t, nil
}

// workerTokens returns a token per worker: the floor's raw commands compare
// it on release like a lock's token, but make none per attempt.
func workerTokens(n int) []string {
	t := make([]string, n)
	for i := range t {
		t[i] = "bench-floor-" + strconv.Itoa(i)
	}
	return t
}

// queryDuration returns the duration in query parameter name, or def.
func queryDuration(q url.Values, name string, def time.Duration) (time.Duration, error) {
	if !q.Has(name) {
		return def, nil
	}
	d, err := time.ParseDuration(q.Get(name))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// memFloor is memlock's raw Acquire and Release on the distlock side's
// store, without the client.
type memFloor struct {
	b      *memlock.Backend
	lease  time.Duration
	tokens []string
}

func openMemFloor(_ context.Context, _ *url.URL, cfg Config, first *distlock.Client) (target, error) {
	m, ok := first.Backend().(*memlock.Backend)
	if !ok {
		return nil, fmt.Errorf("mem:// opened a %T, not a memlock backend", first.Backend())
	}
	return &memFloor{b: m.Connect(), lease: cfg.Lease, tokens: workerTokens(cfg.Workers)}, nil
}

func (f *memFloor) lock(ctx context.Context, w int, key string) (func(context.Context) error, time.Duration, error) {
	k, tok := floorNS+key, f.tokens[w]
	if _, err := f.b.Acquire(ctx, driver.AcquireRequest{Key: k, Token: tok, TTL: f.lease}); err != nil {
		return nil, 0, err
	}
	return func(ctx context.Context) error { return f.b.Release(ctx, k, tok) }, 0, nil
}

func (f *memFloor) close() error { return f.b.Close() }
