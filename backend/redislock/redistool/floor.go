package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
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

// openRedisFloor connects cfg.Clients rueidis clients to the URL's server;
// the backend's own query parameters are left out.
func openRedisFloor(ctx context.Context, u *url.URL, cfg Config, _ *distlock.Client) (target, error) {
	ru := *u
	q := ru.Query()
	dial, err := queryDuration(q, "dial_timeout", 5*time.Second)
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"prefix", "dial_timeout", "request_timeout"} {
		q.Del(name)
	}
	ru.RawQuery = q.Encode()
	opt, err := rueidis.ParseURL(ru.String())
	if err != nil {
		return nil, err
	}
	opt.DisableCache = true
	opt.Dialer.Timeout = dial
	f := &redisFloor{release: rueidis.NewLuaScript(floorReleaseLua), lease: cfg.Lease, tokens: workerTokens(cfg.Workers)}
	for range cfg.Clients {
		c, err := rueidis.NewClient(opt)
		if err != nil {
			return nil, errors.Join(err, f.close())
		}
		f.clients = append(f.clients, c)
	}
	return f, ctx.Err()
}

func (f *redisFloor) lock(ctx context.Context, w int, key string) (func(context.Context) error, time.Duration, error) {
	c, k, tok := f.clients[w%len(f.clients)], floorNS+key, f.tokens[w]
	err := c.Do(ctx, c.B().Set().Key(k).Value(tok).Nx().PxMilliseconds(f.lease.Milliseconds()).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return nil, 0, distlock.ErrNotAcquired
	}
	if err != nil {
		return nil, 0, fmt.Errorf("SET %s NX PX: %w", k, err)
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
	}, 0, nil
}

func (f *redisFloor) close() error {
	for _, c := range f.clients {
		c.Close()
	}
	return nil
}
