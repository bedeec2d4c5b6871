// Package memtool is memlock's side of distlock's store tools: the floor
// of mem:// for distlock bench --floor, and the declarations that doctor has
// nothing to check there and migrate nothing to create. Import it for its side effect:
//
//	import _ "github.com/distlock/distlock/backend/memlock/memtool"
package memtool

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/storetool/doctor"
	"github.com/distlock/distlock/storetool/floor"
	"github.com/distlock/distlock/storetool/migrate"
)

func init() {
	doctor.None("mem", "an in-process store has no server and no settings to check")
	migrate.None("mem", "an in-process store has no server")
	floor.Register("mem", OpenFloor)
}

// memFloor is memlock's raw Acquire and Release on the distlock side's
// store, without the client.
type memFloor struct {
	b      *memlock.Backend
	lease  time.Duration
	tokens []string
}

// OpenFloor returns memlock's Acquire and Release, without the client, on
// a handle of cfg.Backend's store, which must be a memlock backend: the
// floor and the distlock side then work on one store, as they do on a
// server.
func OpenFloor(_ context.Context, _ *url.URL, cfg floor.Config) (floor.Target, error) {
	m, ok := cfg.Backend.(*memlock.Backend)
	if !ok {
		return nil, fmt.Errorf("mem:// opened a %T, not a memlock backend", cfg.Backend)
	}
	return &memFloor{b: m.Connect(), lease: cfg.Lease, tokens: floor.Tokens(cfg.Workers)}, nil
}

// Lock acquires key once with worker w's token.
func (f *memFloor) Lock(ctx context.Context, w int, key string) (func(context.Context) error, error) {
	k, tok := floor.KeyPrefix+key, f.tokens[w]
	if _, err := f.b.Acquire(ctx, driver.AcquireRequest{Key: k, Token: tok, TTL: f.lease}); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return f.b.Release(ctx, k, tok) }, nil
}

// Close closes the handle.
func (f *memFloor) Close() error { return f.b.Close() }
