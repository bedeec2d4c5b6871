package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	distlock.Register("redlock", urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) }))
}

// pkg begins the errors of the backend's URL grammar.
const pkg = "redlock"

// Config is what a redlock:// URL says: each node's client, and the
// backend's options.
type Config struct {
	// Nodes are the nodes' configurations, in the URL's order.
	Nodes []redislock.Config
	// Options are those the URL's parameters set; Open applies them before
	// its own.
	Options []Option
}

// ParseURL reads a redlock:// URL without connecting. The form is
//
//	redlock://[user:password@]host:port,host:port,host:port[/db][?param=value...]
//
// with an odd number of distinct nodes, at least 3, each host:port with its
// port; the credentials and database apply to every node. The parameters,
// applied before Open's options:
//
//	prefix=P              WithPrefix (default "distlock:")
//	dial_timeout=5s       WithDialTimeout: each connection attempt (default 5s)
//	request_timeout=5s    WithRequestTimeout: each request to a node (default 5s)
//	node_timeout=50ms     WithNodeTimeout (default a tenth of the lease, at least 50ms)
//	drift_rate=0.01       WithDrift's rate (default 0.01)
//	drift_margin=2ms      WithDrift's margin (default 2ms)
//
// and the Redis client's (redislock.ClientParams: client_name,
// write_timeout, ...), which go to every node's redis:// URL. addr is
// refused: the nodes are the host list. Any other parameter is an error
// matching driver.ErrInvalidOption, as is an invalid value.
func ParseURL(u *url.URL) (Config, error) {
	if u.Scheme != "redlock" {
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want redlock", u.Scheme)
	}
	addrs, err := nodeAddrs(u.Host)
	if err != nil {
		return Config{}, err
	}
	if err := checkNodes(addrs); err != nil {
		return Config{}, err
	}
	db := strings.Trim(u.Path, "/")
	if _, err := strconv.Atoi(db); db != "" && err != nil {
		return Config{}, urlq.Invalidf(pkg, "path", "database %q is not a number", db)
	}
	var cfg Config
	r := urlq.New(pkg, u.Query())
	var prefix string
	if r.Func("prefix", func(v string) error { prefix = v; return nil }) {
		cfg.Options = append(cfg.Options, WithPrefix(prefix))
	}
	for _, p := range []struct {
		name string
		with func(time.Duration) Option
	}{{"dial_timeout", WithDialTimeout}, {"request_timeout", WithRequestTimeout}, {"node_timeout", WithNodeTimeout}} {
		var d time.Duration
		if r.Duration(p.name, &d) {
			cfg.Options = append(cfg.Options, p.with(d))
		}
	}
	rate, margin := DefaultDriftRate, DefaultDriftMargin
	setRate := r.Float("drift_rate", &rate)
	if setMargin := r.Duration("drift_margin", &margin); setRate || setMargin {
		cfg.Options = append(cfg.Options, WithDrift(rate, margin))
	}
	if u.Query().Has("addr") {
		return Config{}, r.Error("addr", "", errors.New("the nodes are the URL's host list, host:port,host:port,..."))
	}
	node := r.Pass(slices.DeleteFunc(redislock.ClientParams(), func(p string) bool { return p == "addr" })...)
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if _, err := newConfig(cfg.Options); err != nil {
		return Config{}, err
	}
	for _, a := range addrs {
		nu := &url.URL{Scheme: "redis", User: u.User, Host: a, RawQuery: node.Encode()}
		if db != "" {
			nu.Path = "/" + db
		}
		n, err := redislock.ParseURL(nu)
		if err != nil {
			return Config{}, fmt.Errorf("redlock: node %s: %w", a, err)
		}
		cfg.Nodes = append(cfg.Nodes, n)
	}
	return cfg, nil
}

// Open builds one rueidis client per node from rawURL (see ParseURL), in
// parallel, and returns Redlock over them; Close closes them. opts apply
// after the URL's. Every node must be reachable: Open fails, naming each
// node's dial error, otherwise.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := urlq.Parse(pkg, rawURL)
	if err != nil {
		return nil, err
	}
	return openURL(ctx, u, opts...)
}

// openURL is Open after url.Parse, and distlock.Open's way in.
func openURL(ctx context.Context, u *url.URL, opts ...Option) (*Backend, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	c, err := newConfig(append(cfg.Options, opts...))
	if err != nil {
		return nil, err
	}
	addrs := strings.Split(u.Host, ",")
	return newBackend(ctx, c, addrs, func(ctx context.Context, i int) (*redislock.Backend, error) {
		return redislock.Dial(ctx, cfg.Nodes[i], c.nodeOptions()...)
	})
}

// nodeAddrs splits the host part of a redlock URL into node addresses.
func nodeAddrs(host string) ([]string, error) {
	addrs := strings.Split(host, ",")
	for _, a := range addrs {
		if h, p, err := net.SplitHostPort(a); err != nil || h == "" || p == "" {
			return nil, urlq.Invalidf(pkg, "host", "node %q: want host:port", a)
		}
	}
	return addrs, nil
}

// checkNodes refuses a number of nodes that is even or less than 3, and a
// node given twice.
func checkNodes(addrs []string) error {
	if n := len(addrs); n < 3 || n%2 == 0 {
		return fmt.Errorf("redlock: %d nodes: %w: want an odd number, at least 3", n, driver.ErrInvalidOption)
	}
	for i, a := range addrs {
		if slices.Contains(addrs[:i], a) {
			return fmt.Errorf("redlock: node %s given twice: %w: the nodes must be independent", a, driver.ErrInvalidOption)
		}
	}
	return nil
}
