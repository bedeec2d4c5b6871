package redlock

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
)

func init() {
	distlock.Register("redlock", func(ctx context.Context, u *url.URL) (driver.Backend, error) {
		return Open(ctx, u.String())
	})
}

// Open builds one rueidis client per node from rawURL (redislock.Open for
// each node, in parallel) and returns Redlock over them; Close closes them.
// The form is
//
//	redlock://[user:password@]host:port,host:port,host:port[/db][?param=value...]
//
// with an odd number of distinct nodes, at least 3, each host:port with its
// port; the credentials and database apply to every node. Query
// parameters, applied before opts:
//
//	prefix=P              WithPrefix (default "distlock:")
//	dial_timeout=5s       WithDialTimeout: each connection attempt (default 5s)
//	request_timeout=5s    WithRequestTimeout: each request to a node (default 5s)
//	node_timeout=50ms     WithNodeTimeout (default a tenth of the lease, at least 50ms)
//	drift_rate=0.01       WithDrift's rate (default 0.01)
//	drift_margin=2ms      WithDrift's margin (default 2ms)
//
// Other parameters are passed to every node's redis:// URL, for
// rueidis.ParseURL (client_name, write_timeout, ...). Every node must be
// reachable: Open fails, naming each node's dial error, otherwise.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redlock: %w: %w", driver.ErrInvalidOption, err)
	}
	q := u.Query()
	urlOpts, err := queryOptions(q)
	if err == nil && u.Scheme != "redlock" {
		err = fmt.Errorf("%w: scheme %q, want redlock", driver.ErrInvalidOption, u.Scheme)
	}
	var addrs []string
	if err == nil {
		addrs, err = nodeAddrs(u.Host)
	}
	db := strings.Trim(u.Path, "/")
	if _, perr := strconv.Atoi(db); err == nil && db != "" && perr != nil {
		err = fmt.Errorf("%w: database %q is not a number", driver.ErrInvalidOption, db)
	}
	if err != nil {
		return nil, fmt.Errorf("redlock: %s: %w", driver.RedactURL(u), err)
	}
	cfg, err := newConfig(append(urlOpts, opts...))
	if err != nil {
		return nil, err
	}
	return newBackend(ctx, cfg, addrs, func(ctx context.Context, i int) (*redislock.Backend, error) {
		nu := url.URL{Scheme: "redis", User: u.User, Host: addrs[i], RawQuery: q.Encode()}
		if db != "" {
			nu.Path = "/" + db
		}
		return redislock.Open(ctx, nu.String(), cfg.nodeOptions()...)
	})
}

// nodeAddrs splits the host part of a redlock URL into node addresses.
func nodeAddrs(host string) ([]string, error) {
	addrs := strings.Split(host, ",")
	for _, a := range addrs {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return nil, fmt.Errorf("%w: node %q: want host:port", driver.ErrInvalidOption, a)
		}
	}
	return addrs, nil
}

// queryOptions takes Redlock's own parameters out of q and returns them as
// options.
func queryOptions(q url.Values) ([]Option, error) {
	var opts []Option
	if q.Has("prefix") {
		opts = append(opts, WithPrefix(q.Get("prefix")))
	}
	durations := map[string]func(time.Duration) Option{
		"dial_timeout":    WithDialTimeout,
		"request_timeout": WithRequestTimeout,
		"node_timeout":    WithNodeTimeout,
	}
	for name, opt := range durations {
		if q.Has(name) {
			d, err := time.ParseDuration(q.Get(name))
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", driver.ErrInvalidOption, name, err)
			}
			opts = append(opts, opt(d))
		}
	}
	if q.Has("drift_rate") || q.Has("drift_margin") {
		rate, margin := DefaultDriftRate, DefaultDriftMargin
		var err error
		if q.Has("drift_rate") {
			if rate, err = strconv.ParseFloat(q.Get("drift_rate"), 64); err != nil {
				return nil, fmt.Errorf("%w: drift_rate: %w", driver.ErrInvalidOption, err)
			}
		}
		if q.Has("drift_margin") {
			if margin, err = time.ParseDuration(q.Get("drift_margin")); err != nil {
				return nil, fmt.Errorf("%w: drift_margin: %w", driver.ErrInvalidOption, err)
			}
		}
		opts = append(opts, WithDrift(rate, margin))
	}
	for _, name := range []string{"prefix", "dial_timeout", "request_timeout", "node_timeout", "drift_rate", "drift_margin"} {
		q.Del(name)
	}
	return opts, nil
}
