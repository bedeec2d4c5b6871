package natslock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	distlock.Register("nats", urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) }))
}

// pkg begins the errors of the backend's URL grammar.
const pkg = "natslock"

// DefaultBucket is the bucket of a URL without a bucket parameter.
const DefaultBucket = "distlock"

// Config is what a nats:// URL says: how Open reaches NATS, and the
// backend's options.
type Config struct {
	// Servers are the servers' URLs, nats://HOST:PORT.
	Servers []string
	// Bucket is the Key-Value bucket, made as CreateBucket makes it.
	Bucket string
	// User and Password authenticate with a user's password; Token, if
	// User is empty, with a token (the URL's user without a password).
	User, Password, Token string
	// ConnectTimeout bounds connecting to each server; 0 is
	// DefaultConnectTimeout (5s).
	ConnectTimeout time.Duration
	// Options are those the URL's parameters set; Open applies them before
	// its own.
	Options []Option
}

// ParseURL reads a nats:// URL without connecting:
//
//	nats://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...][?bucket=B&connect_timeout=D&request_timeout=D]
//
// bucket (default DefaultBucket) and connect_timeout set Config's fields,
// request_timeout sets WithRequestTimeout. Any other parameter, a path or
// an invalid value is an error matching driver.ErrInvalidOption.
func ParseURL(u *url.URL) (Config, error) {
	switch {
	case u.Scheme != "nats":
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want nats", u.Scheme)
	case u.Host == "":
		return Config{}, urlq.Invalidf(pkg, "host", "no server: want nats://HOST:PORT[,HOST:PORT...]?bucket=...")
	case strings.Trim(u.Path, "/") != "":
		return Config{}, urlq.Invalidf(pkg, "path", "%q: the bucket is a parameter, ?bucket=...", u.Path)
	}
	cfg := Config{Bucket: DefaultBucket}
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return Config{}, urlq.Invalidf(pkg, "host", "an empty server")
		}
		cfg.Servers = append(cfg.Servers, "nats://"+h)
	}
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			cfg.User, cfg.Password = u.User.Username(), p
		} else {
			cfg.Token = u.User.Username()
		}
	}
	r := urlq.New(pkg, u.Query())
	r.String("bucket", &cfg.Bucket)
	r.Func("connect_timeout", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("want a positive duration such as 5s")
		}
		cfg.ConnectTimeout = d
		return nil
	})
	var d time.Duration
	if r.Duration("request_timeout", &d) {
		cfg.Options = append(cfg.Options, WithRequestTimeout(d))
	}
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if err := validBucket(cfg.Bucket); err != nil {
		return Config{}, err
	}
	if _, err := newConfig(cfg.Options); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Connect connects to the servers of cfg, trying each within
// cfg.ConnectTimeout, and returns a connection that reconnects for as long
// as it is open, every 250ms or so, and buffers nothing while it
// reconnects: a call meanwhile fails at once rather than reaching the
// store after its caller gave up on it.
func Connect(ctx context.Context, cfg Config) (*nats.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	timeout := cfg.ConnectTimeout
	if timeout <= 0 {
		timeout = DefaultConnectTimeout
	}
	opts := []nats.Option{nats.Name("distlock"), nats.Timeout(timeout), nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond), nats.ReconnectBufSize(-1)}
	switch {
	case cfg.User != "":
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	case cfg.Token != "":
		opts = append(opts, nats.Token(cfg.Token))
	}
	nc, err := nats.Connect(strings.Join(cfg.Servers, ","), opts...)
	if err != nil {
		return nil, fmt.Errorf("natslock: connect: %w", dialCause(ctx, err, cfg.Servers, timeout))
	}
	return nc, nil
}

// dialCause adds to the client's "no servers available" the reason the
// first server could not be reached (a refused connection, a timeout),
// which the client does not say.
func dialCause(ctx context.Context, err error, servers []string, timeout time.Duration) error {
	if !errors.Is(err, nats.ErrNoServers) {
		return err
	}
	d := net.Dialer{Timeout: timeout}
	c, derr := d.DialContext(ctx, "tcp", strings.TrimPrefix(servers[0], "nats://"))
	if derr != nil {
		return fmt.Errorf("%w: %w", err, derr)
	}
	_ = c.Close()
	return err
}

// Open connects to the servers rawURL names (see ParseURL and Connect),
// checks with one request, bounded by ctx and the request timeout, that
// the bucket exists as CheckBucket wants it, and returns a backend over
// it that closes the connection on Close. opts apply after the URL's. A
// missing or unfit bucket is an error matching driver.ErrNoSchema.
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
	nc, err := Connect(ctx, cfg)
	if err != nil {
		return nil, err
	}
	b, err := New(nc, cfg.Bucket, append(slices.Clip(cfg.Options), opts...)...)
	if err != nil {
		nc.Close()
		return nil, err
	}
	b.own = true
	if err := b.call(ctx, func(ctx context.Context) error { return CheckBucket(ctx, b.js, cfg.Bucket) }); err != nil {
		_ = b.Close()
		return nil, b.fail(err)
	}
	return b, nil
}
