package etcdlock

import (
	"context"
	"net/url"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	distlock.Register("etcd", urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) }))
}

// Config is what an etcd:// URL says: where etcd is, and the backend's
// options.
type Config struct {
	// Endpoints are the members' client URLs, http://HOST:PORT.
	Endpoints []string
	// Options are those the URL's path and parameters set; Open applies
	// them before its own.
	Options []Option
}

// ParseURL reads an etcd:// URL (see the package doc) without connecting.
// A URL that is not one, or a parameter that is unknown or invalid, is an
// error matching driver.ErrInvalidOption.
func ParseURL(u *url.URL) (Config, error) {
	const pkg = "etcdlock"
	switch {
	case u.Scheme != "etcd":
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want etcd", u.Scheme)
	case u.User != nil:
		return Config{}, urlq.Invalidf(pkg, "user", "etcd:// takes no credentials")
	case u.Host == "":
		return Config{}, urlq.Invalidf(pkg, "host", "no endpoint: want etcd://HOST:PORT[,HOST:PORT...][/PREFIX]")
	}
	var cfg Config
	for _, h := range strings.Split(u.Host, ",") {
		if h == "" {
			return Config{}, urlq.Invalidf(pkg, "host", "an empty endpoint")
		}
		cfg.Endpoints = append(cfg.Endpoints, "http://"+h)
	}
	if p := strings.Trim(u.Path, "/"); p != "" {
		cfg.Options = append(cfg.Options, WithPrefix(p))
	}
	r := urlq.New(pkg, u.Query())
	var d time.Duration
	if r.Duration("dial_timeout", &d) {
		cfg.Options = append(cfg.Options, WithDialTimeout(d))
	}
	if r.Duration("request_timeout", &d) {
		cfg.Options = append(cfg.Options, WithRequestTimeout(d))
	}
	var linked bool
	if r.Bool("linked_queue", &linked) && linked {
		cfg.Options = append(cfg.Options, WithLinkedQueue())
	}
	var layout KeyLayout
	if r.Func("key_layout", func(v string) error { layout = KeyLayout(v); _, err := layout.layout(); return err }) {
		cfg.Options = append(cfg.Options, WithKeyLayout(layout))
	}
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if _, err := newConfig(cfg.Options); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// DialTimeout returns the bound on the first contact with etcd that cfg's
// Options set (URL parameter dial_timeout), or DefaultDialTimeout if they
// set none or are invalid (ParseURL returns none invalid). It is for a
// program that connects to the same members with a client of its own, as
// the bench floor does.
func (cfg Config) DialTimeout() time.Duration {
	c, err := newConfig(cfg.Options)
	if err != nil || c.dialTimeout == 0 {
		return DefaultDialTimeout
	}
	return c.dialTimeout
}

// Open connects to the etcd members rawURL names (see the package doc and
// Dial) and returns a backend that closes its client on Close. opts apply
// after the URL's.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Backend, error) {
	u, err := urlq.Parse("etcdlock", rawURL)
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
	return Dial(ctx, clientv3.Config{Endpoints: cfg.Endpoints}, append(cfg.Options, opts...)...)
}
