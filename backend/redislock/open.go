package redislock

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis-sentinel", "redis-cluster"} {
		distlock.Register(scheme, func(ctx context.Context, u *url.URL) (driver.Backend, error) {
			return Open(ctx, u.String())
		})
	}
}

// Open builds a rueidis client from rawURL and returns a backend that owns it
// (Close closes it). The query parameter prefix sets WithPrefix; opts apply
// after it. The forms are:
//
//	redis://[user:password@]host:port[/db]          one node (a Cluster node is detected)
//	rediss://...                                    the same over TLS
//	redis-cluster://host:port[?addr=host:port...]   Redis Cluster, from seed nodes
//	redis-sentinel://host:port/master[/db][?addr=host:port...]
//	                                                the primary of master, from sentinels
//
// Other query parameters are rueidis.ParseURL's (dial_timeout, client_name,
// ...). The context is not used: rueidis dials with its own timeout.
func Open(_ context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	q := u.Query()
	if q.Has("prefix") {
		opts = append([]Option{WithPrefix(q.Get("prefix"))}, opts...)
		q.Del("prefix")
	}
	if _, err := newConfig(opts); err != nil {
		return nil, err // before any connection is made
	}
	var master string
	switch u.Scheme {
	case "redis", "rediss":
	case "redis-cluster":
		u.Scheme = "redis"
	case "redis-sentinel":
		u.Scheme = "redis"
		parts := strings.Split(strings.Trim(u.Path, "/"), "/")
		if master = parts[0]; master == "" || len(parts) > 2 {
			return nil, fmt.Errorf("redislock: %s: want redis-sentinel://host:port/master[/db]", u.Redacted())
		}
		u.Path = ""
		if len(parts) == 2 {
			if _, err := strconv.Atoi(parts[1]); err != nil {
				return nil, fmt.Errorf("redislock: %s: database %q is not a number", u.Redacted(), parts[1])
			}
			q.Set("db", parts[1])
		}
	default:
		return nil, fmt.Errorf("redislock: unsupported scheme %q", u.Scheme)
	}
	u.RawQuery = q.Encode()
	opt, err := rueidis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	opt.Sentinel.MasterSet = master
	opt.DisableCache = true // no client-side caching: lock state must come from the server
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redislock: connect %s: %w", u.Redacted(), err)
	}
	b, err := newRueidis(client, true, opts)
	if err != nil {
		client.Close()
		return nil, err
	}
	return b, nil
}
