package pglock

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	open := urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) })
	distlock.Register("postgres", open)
	distlock.Register("postgresql", open)
}

// pkg begins the errors of the backend's URL grammar.
const pkg = "pglock"

// Config is what a postgres:// URL says: the pool to build, and the
// backend's options.
type Config struct {
	// Pool is pgxpool's configuration of the URL, with a connect timeout
	// of DefaultConnectTimeout (5s) unless the URL sets connect_timeout
	// to more than 0.
	Pool *pgxpool.Config
	// Options are those the URL's parameters set; Open applies them before
	// its own.
	Options []Option
}

// ParseURL reads a postgres:// or postgresql:// URL (see the package doc)
// without connecting. An invalid value, or a URL pgx cannot read, is an
// error matching driver.ErrInvalidOption.
func ParseURL(u *url.URL) (Config, error) {
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want postgres or postgresql", u.Scheme)
	}
	var cfg Config
	r := urlq.New(pkg, u.Query())
	var d time.Duration
	if r.Duration("request_timeout", &d) {
		cfg.Options = append(cfg.Options, WithRequestTimeout(d))
	}
	var terminate bool
	if r.Bool("terminate_on_force_release", &terminate) {
		cfg.Options = append(cfg.Options, WithTerminateOnForceRelease(terminate))
	}
	var ids KeyIDs
	if r.Func("key_ids", func(v string) error { ids = KeyIDs(v); return ids.valid() }) {
		cfg.Options = append(cfg.Options, WithKeyIDs(ids))
	}
	rest := r.Rest()
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if _, err := newOptions(cfg.Options); err != nil {
		return Config{}, err
	}
	nu := *u
	nu.RawQuery = rest.Encode()
	pc, err := pgxpool.ParseConfig(nu.String())
	if err != nil {
		// pgx's error quotes the URL, password masked; say only why.
		why := err.Error()
		if _, after, ok := strings.Cut(why, "`: "); ok {
			why = after
		}
		return Config{}, urlq.Invalidf(pkg, "parameters", "%s", why)
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = DefaultConnectTimeout
	}
	cfg.Pool = pc
	return cfg, nil
}

// Open returns a backend over a pool of its own on rawURL (see the
// package doc and ParseURL); Close closes the pool. opts apply after the
// URL's. No connection is made before the first call, which names the dial
// error if the server cannot be reached; the connect timeout bounds it
// even under context.Background().
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg.Pool)
	if err != nil {
		return nil, fmt.Errorf("pglock: connect: %w", err)
	}
	b, err := New(pool, append(slices.Clip(cfg.Options), opts...)...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	b.ownPool = true
	return b, nil
}
