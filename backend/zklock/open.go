package zklock

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	distlock.Register("zk", urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) }))
}

// Config is what a zk:// URL says: where ZooKeeper is, and the backend's
// options.
type Config struct {
	// Servers are the ensemble's addresses, HOST:PORT; ParseURL gives a
	// server without a port ZooKeeper's, 2181 (zk.DefaultPort).
	Servers []string
	// Options are those the URL's path and parameters set; Open applies
	// them before its own.
	Options []Option
}

// ParseURL reads a zk:// URL (see the package doc) without connecting. A
// URL that is not one, or a parameter that is unknown or invalid, is an
// error matching driver.ErrInvalidOption.
func ParseURL(u *url.URL) (Config, error) {
	const pkg = "zklock"
	switch {
	case u.Scheme != "zk":
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want zk", u.Scheme)
	case u.User != nil:
		return Config{}, urlq.Invalidf(pkg, "user", "zk:// takes no credentials")
	case u.Host == "":
		return Config{}, urlq.Invalidf(pkg, "host", "no server: want zk://HOST:PORT[,HOST:PORT...][/ROOT]")
	}
	cfg := Config{Servers: strings.Split(u.Host, ",")}
	for i, h := range cfg.Servers {
		if h == "" {
			return Config{}, urlq.Invalidf(pkg, "host", "an empty server address")
		}
		if _, _, err := net.SplitHostPort(h); err != nil {
			cfg.Servers[i] = net.JoinHostPort(strings.Trim(h, "[]"), strconv.Itoa(zk.DefaultPort))
		}
	}
	if r := strings.Trim(u.Path, "/"); r != "" {
		cfg.Options = append(cfg.Options, WithRoot(r))
	}
	r := urlq.New(pkg, u.Query())
	for _, p := range []struct {
		name string
		with func(time.Duration) Option
	}{{"session_timeout", WithSessionTimeout}, {"dial_timeout", WithDialTimeout}, {"request_timeout", WithRequestTimeout}} {
		var d time.Duration
		if r.Duration(p.name, &d) {
			cfg.Options = append(cfg.Options, p.with(d))
		}
	}
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if _, err := apply(cfg.Options); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// SessionTimeout returns the session timeout cfg's Options ask of the
// server (URL parameter session_timeout), or DefaultSessionTimeout if they
// set none or are invalid (ParseURL returns none invalid).
func (cfg Config) SessionTimeout() time.Duration { return cfg.config().sessionTimeout }

// DialTimeout returns how long cfg's Options let Dial wait for a session
// (URL parameter dial_timeout), or DefaultDialTimeout if they set none or
// are invalid (ParseURL returns none invalid).
func (cfg Config) DialTimeout() time.Duration { return cfg.config().dialTimeout }

// config is what cfg's Options set, or the defaults if they are invalid.
func (cfg Config) config() config {
	c, err := apply(cfg.Options)
	if err != nil {
		return defaults()
	}
	return c
}

// Open connects to the ZooKeeper servers rawURL names (see the package doc
// and Dial) and returns a backend over a new session, which Close ends.
// opts apply after the URL's.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := urlq.Parse("zklock", rawURL)
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
	return Dial(ctx, cfg.Servers, append(cfg.Options, opts...)...)
}
