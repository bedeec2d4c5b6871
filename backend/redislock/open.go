package redislock

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

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
// (Close closes it). The forms are:
//
//	redis://[user:password@]host:port[/db]          one node (a Cluster node is detected)
//	rediss://...                                    the same over TLS
//	redis-cluster://host:port[?addr=host:port...]   Redis Cluster, from seed nodes
//	redis-sentinel://host:port/master[/db][?addr=host:port...]
//	                                                the primary of master, from sentinels
//
// redis:// and rediss:// without a host dial localhost:6379; the Cluster and
// Sentinel forms need an address in the host part, and a Sentinel address
// without a port means port 26379.
//
// Query parameters, applied before opts:
//
//	prefix=P             WithPrefix (default "distlock:")
//	dial_timeout=5s      WithDialTimeout: each connection attempt (default 5s)
//	request_timeout=5s   WithRequestTimeout: each request (default 5s)
//	waiter_timeout=1s    WithWaiterTimeout: a waiter's place in a queue (default 1s)
//
// Other query parameters are rueidis.ParseURL's (client_name, write_timeout,
// ...). Open connects within the dial timeout or ctx's deadline, whichever
// is sooner, then checks the server's version within ctx and the request
// timeout: an unreachable Redis fails with the dial error, a Redis older
// than MinVersion with the version found.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	q := u.Query()
	urlOpts, err := queryOptions(q)
	if err != nil {
		return nil, fmt.Errorf("redislock: %s: %w", driver.RedactURL(u), err)
	}
	cfg, err := newConfig(append(urlOpts, opts...))
	if err != nil {
		return nil, err // before any connection is made
	}
	master, err := normalizeURL(u, q)
	if err != nil {
		return nil, fmt.Errorf("redislock: %s: %w", driver.RedactURL(u), err)
	}
	opt, err := rueidis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("redislock: %w", err)
	}
	opt.Sentinel.MasterSet = master
	opt.DisableCache = true // no client-side caching: lock state must come from the server
	opt.Dialer.Timeout = cfg.dialTimeout
	if d, ok := ctx.Deadline(); ok {
		opt.Dialer.Timeout = max(min(opt.Dialer.Timeout, time.Until(d)), time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redislock: connect %s: %w", driver.RedactURL(u), err)
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redislock: connect %s: %w", driver.RedactURL(u), err)
	}
	b, err := newRueidis(ctx, client, true, cfg)
	if err != nil {
		client.Close()
		return nil, err
	}
	return b, nil
}

// queryOptions takes the backend's own parameters out of q and returns them
// as options.
func queryOptions(q url.Values) ([]Option, error) {
	var opts []Option
	if q.Has("prefix") {
		opts = append(opts, WithPrefix(q.Get("prefix")))
	}
	for name, opt := range map[string]func(time.Duration) Option{
		"dial_timeout":    WithDialTimeout,
		"request_timeout": WithRequestTimeout,
		"waiter_timeout":  WithWaiterTimeout,
	} {
		if !q.Has(name) {
			continue
		}
		d, err := time.ParseDuration(q.Get(name))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", driver.ErrInvalidOption, name, err)
		}
		opts = append(opts, opt(d))
	}
	for _, name := range []string{"prefix", "dial_timeout", "request_timeout", "waiter_timeout"} {
		q.Del(name)
	}
	return opts, nil
}

// normalizeURL rewrites u, with query q, into the redis:// form that
// rueidis.ParseURL reads, and returns the Sentinel master name, if any.
func normalizeURL(u *url.URL, q url.Values) (master string, err error) {
	switch u.Scheme {
	case "redis", "rediss":
	case "redis-cluster":
		if u.Host == "" {
			return "", fmt.Errorf("%w: no seed node address: want redis-cluster://host:port[?addr=host:port...]", driver.ErrInvalidOption)
		}
		u.Scheme = "redis"
	case "redis-sentinel":
		if master, err = sentinelURL(u, q); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("%w: unsupported scheme %q", driver.ErrInvalidOption, u.Scheme)
	}
	u.RawQuery = q.Encode()
	return master, nil
}

// sentinelURL rewrites a redis-sentinel URL: the master name and database
// leave the path, and sentinel addresses get port 26379 if they have none.
func sentinelURL(u *url.URL, q url.Values) (string, error) {
	const want = "want redis-sentinel://host:port/master[/db][?addr=host:port...]"
	if u.Host == "" {
		return "", fmt.Errorf("%w: no sentinel address: %s", driver.ErrInvalidOption, want)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	master := parts[0]
	if master == "" || len(parts) > 2 {
		return "", fmt.Errorf("%w: no master name: %s", driver.ErrInvalidOption, want)
	}
	if len(parts) == 2 {
		if _, err := strconv.Atoi(parts[1]); err != nil {
			return "", fmt.Errorf("%w: database %q is not a number", driver.ErrInvalidOption, parts[1])
		}
		q.Set("db", parts[1])
	}
	u.Scheme, u.Path = "redis", ""
	if u.Port() == "" {
		u.Host += ":26379"
	}
	addrs := q["addr"]
	for i, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			addrs[i] = a + ":26379"
		}
	}
	return master, nil
}
