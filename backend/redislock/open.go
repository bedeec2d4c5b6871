package redislock

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

	"github.com/redis/rueidis"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	for _, scheme := range []string{"redis", "rediss", "redis-sentinel", "redis-cluster"} {
		distlock.Register(scheme, urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) }))
	}
}

// clientParams are the URL parameters that rueidis.ParseURL reads.
// master_set is not among them: redis-sentinel://host/master names the
// master, and on any other URL rueidis would ignore it.
var clientParams = []string{"db", "write_timeout", "addr", "skip_verify", "protocol", "client_cache", "max_retries", "client_name"}

// ClientParams returns the URL parameters that the Redis client itself
// reads (db, addr, client_name, write_timeout, ...), for a URL grammar
// over Redis nodes that hands them on to ParseURL, as redlock's does.
func ClientParams() []string { return slices.Clone(clientParams) }

// Config is what a Redis URL says: the client to build, and the backend's
// options.
type Config struct {
	// Client is the rueidis client's configuration: addresses, credentials,
	// database, TLS, Sentinel master. Open sets its dial timeout and its
	// client-side caching, which tracks held keys (see Open).
	Client rueidis.ClientOption
	// Options are those the URL's parameters set; Open applies them before
	// its own.
	Options []Option
}

// ParseURL reads a Redis URL without connecting. The forms are:
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
// The parameters, applied before Open's options:
//
//	prefix=P             WithPrefix (default "distlock:")
//	dial_timeout=5s      WithDialTimeout: each connection attempt (default 5s)
//	request_timeout=5s   WithRequestTimeout: each request (default 5s)
//	waiter_timeout=1s    WithWaiterTimeout: a waiter's place in a queue (default 1s)
//	replica_ack=N        WithReplicaAck: confirm grants and renewals once N replicas acknowledged them (default 0: off)
//	replica_ack_timeout=1s  how long WAIT waits for them (default 1s; needs replica_ack)
//	track_loss=false     WithoutLossTracking (default true)
//
// and rueidis.ParseURL's: db, addr, client_name, write_timeout,
// skip_verify, protocol, client_cache, max_retries. Any other is an error
// matching driver.ErrInvalidOption, as is an invalid value.
func ParseURL(u *url.URL) (Config, error) {
	r := urlq.New(pkg, u.Query())
	var cfg Config
	var prefix string
	if r.Func("prefix", func(v string) error { prefix = v; return nil }) {
		cfg.Options = append(cfg.Options, WithPrefix(prefix))
	}
	for _, p := range []struct {
		name string
		with func(time.Duration) Option
	}{{"dial_timeout", WithDialTimeout}, {"request_timeout", WithRequestTimeout}, {"waiter_timeout", WithWaiterTimeout}} {
		var d time.Duration
		if r.Duration(p.name, &d) {
			cfg.Options = append(cfg.Options, p.with(d))
		}
	}
	var track bool
	if r.Bool("track_loss", &track) && !track {
		cfg.Options = append(cfg.Options, WithoutLossTracking())
	}
	ack := replicaAck{timeout: DefaultReplicaAckTimeout}
	ackSet := r.Func("replica_ack", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errors.New("want a count of replicas, 0 or more")
		}
		ack.replicas = n
		return nil
	})
	timeoutSet := r.Func("replica_ack_timeout", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("want a positive duration such as 100ms or 1s")
		}
		ack.timeout = d
		return nil
	})
	q := r.Pass(clientParams...)
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if timeoutSet && ack.replicas == 0 {
		return Config{}, r.Error("replica_ack_timeout", "", errors.New("needs replica_ack=N with N of 1 or more"))
	}
	if ackSet {
		cfg.Options = append(cfg.Options, WithReplicaAck(ack.replicas, ack.timeout))
	}
	if _, err := newConfig(cfg.Options); err != nil {
		return Config{}, err
	}
	nu := *u
	master, err := normalizeURL(&nu, q)
	if err != nil {
		return Config{}, err
	}
	if cfg.Client, err = rueidis.ParseURL(nu.String()); err != nil {
		return Config{}, urlq.Invalidf(pkg, "syntax", "%w", err)
	}
	cfg.Client.Sentinel.MasterSet = master
	return cfg, nil
}

// DialTimeout returns the timeout of each connection attempt that cfg's
// Options set (URL parameter dial_timeout), or DefaultDialTimeout if they
// set none or are invalid (ParseURL returns none invalid). It is for a
// program that dials the same Redis with a client of its own, as the bench
// floor does.
func (cfg Config) DialTimeout() time.Duration {
	c, err := newConfig(cfg.Options)
	if err != nil {
		return DefaultDialTimeout
	}
	return c.dialTimeout
}

// ReplicaAck returns what cfg's Options set with WithReplicaAck (URL
// parameters replica_ack and replica_ack_timeout): how many replicas must
// acknowledge each grant and renewal, and within what timeout; 0 replicas
// when none is asked for, or when the options are invalid (ParseURL returns
// none invalid). It is for a program that checks the deployment for them,
// as the doctor does.
func (cfg Config) ReplicaAck() (replicas int, timeout time.Duration) {
	c, err := newConfig(cfg.Options)
	if err != nil || c.ack.replicas == 0 {
		return 0, 0
	}
	return c.ack.replicas, c.ack.timeout
}

// pkg begins the errors of the backend's URL grammar.
const pkg = "redislock"

// Open builds a rueidis client from rawURL (see ParseURL) and returns a
// backend that owns it (Close closes it). opts apply after the URL's. Open
// connects within the dial timeout or ctx's deadline, whichever is sooner,
// then checks the server's version within ctx and the request timeout: an
// unreachable Redis fails with the dial error, a Redis older than
// MinVersion with the version found.
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
	return Dial(ctx, cfg, opts...)
}

// Dial builds the rueidis client cfg describes, as Open does, with
// cfg.Options and then opts, and returns a backend that owns it (Close
// closes it). It is Open for a Config you read or built yourself; Redlock
// dials its nodes with it.
func Dial(ctx context.Context, cfg Config, opts ...Option) (*Backend, error) {
	c, err := newConfig(append(slices.Clip(cfg.Options), opts...))
	if err != nil {
		return nil, err // before any connection is made
	}
	opt := cfg.Client
	opt.Dialer.Timeout = c.dialTimeout
	if d, ok := ctx.Deadline(); ok {
		opt.Dialer.Timeout = max(min(opt.Dialer.Timeout, time.Until(d)), time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redislock: connect: %w", err)
	}
	// Client-side caching serves the tracker's reads only (readTracked):
	// every lock operation is a script, which is never cached. Redis older
	// than 6 has no tracking: the client then does without.
	track := newTracker()
	if c.noLossTracking {
		track = nil
	}
	opt.DisableCache = track == nil
	if track != nil {
		opt.CacheSizeEachConn = trackCacheSize
		opt.OnInvalidations = track.invalidatedMessages
	}
	client, err := rueidis.NewClient(opt)
	if errors.Is(err, rueidis.ErrNoCache) && track != nil {
		opt.DisableCache, opt.OnInvalidations, track = true, nil, nil
		client, err = rueidis.NewClient(opt)
	}
	if err != nil {
		return nil, fmt.Errorf("redislock: connect: %w", err)
	}
	b, err := newRueidis(ctx, client, true, c, track)
	if err != nil {
		client.Close()
		return nil, err
	}
	return b, nil
}

// normalizeURL rewrites u, with query q, into the redis:// form that
// rueidis.ParseURL reads, and returns the Sentinel master name, if any.
func normalizeURL(u *url.URL, q url.Values) (master string, err error) {
	switch u.Scheme {
	case "redis", "rediss":
	case "redis-cluster":
		if u.Host == "" {
			return "", urlq.Invalidf(pkg, "host", "no seed node address: want redis-cluster://host:port[?addr=host:port...]")
		}
		u.Scheme = "redis"
	case "redis-sentinel":
		if master, err = sentinelURL(u, q); err != nil {
			return "", err
		}
	default:
		return "", urlq.Invalidf(pkg, "scheme", "%q, want redis, rediss, redis-cluster or redis-sentinel", u.Scheme)
	}
	u.RawQuery = q.Encode()
	return master, nil
}

// sentinelURL rewrites a redis-sentinel URL: the master name and database
// leave the path, and sentinel addresses get port 26379 if they have none.
func sentinelURL(u *url.URL, q url.Values) (string, error) {
	const want = "want redis-sentinel://host:port/master[/db][?addr=host:port...]"
	if u.Host == "" {
		return "", urlq.Invalidf(pkg, "host", "no sentinel address: %s", want)
	}
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	master := parts[0]
	if master == "" || len(parts) > 2 {
		return "", urlq.Invalidf(pkg, "path", "no master name: %s", want)
	}
	if len(parts) == 2 {
		if _, err := strconv.Atoi(parts[1]); err != nil {
			return "", urlq.Invalidf(pkg, "path", "database %q is not a number", parts[1])
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
