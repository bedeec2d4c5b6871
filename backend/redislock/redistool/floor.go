package redistool

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/storetool/floor"
)

// floorReleaseLua deletes a key if it holds the token: the least a safe
// release needs.
//
//go:embed floor_release.lua
var floorReleaseLua string

// redisFloor is SET NX PX and a compare-and-delete script, each client on
// a connection of its own.
type redisFloor struct {
	clients []rueidis.Client
	release *rueidis.Lua
	lease   time.Duration
	tokens  []string
}

// openRedisFloor connects cfg.Clients rueidis clients to the server of the
// URL, read by redislock.ParseURL, with the URL's dial timeout and without
// client-side caching, as redislock.Open's client.
func openRedisFloor(ctx context.Context, u *url.URL, cfg floor.Config) (floor.Target, error) {
	rc, err := redislock.ParseURL(u)
	if err != nil {
		return nil, err
	}
	opt := rc.Client
	opt.DisableCache = true
	opt.Dialer.Timeout = rc.DialTimeout()
	f := &redisFloor{release: rueidis.NewLuaScript(floorReleaseLua), lease: cfg.Lease, tokens: floor.Tokens(cfg.Workers)}
	for range cfg.Clients {
		c, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, errors.Join(err, f.Close())
		}
		f.clients = append(f.clients, c)
	}
	return f, ctx.Err()
}

// Lock sets key to the worker's token if it is absent, with the lease.
func (f *redisFloor) Lock(ctx context.Context, w int, key string) (func(context.Context) error, error) {
	c, k, tok := f.clients[w%len(f.clients)], floor.KeyPrefix+key, f.tokens[w]
	err := c.Do(ctx, c.B().Set().Key(k).Value(tok).Nx().PxMilliseconds(f.lease.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return nil, distlock.ErrNotAcquired
	}
	if err != nil {
		return nil, fmt.Errorf("SET %s NX PX: %w", k, err)
	}
	return func(ctx context.Context) error {
		n, err := f.release.Exec(ctx, c, []string{k}, []string{tok}).AsInt64()
		switch {
		case err != nil:
			return fmt.Errorf("release script on %s: %w", k, err)
		case n == 0:
			return fmt.Errorf("release %s: %w", k, distlock.ErrNotHeld)
		}
		return nil
	}, nil
}

// Close closes the clients.
func (f *redisFloor) Close() error {
	for _, c := range f.clients {
		c.Close()
	}
	return nil
}
