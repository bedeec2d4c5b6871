package mysqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/mysqlurl"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	distlock.Register("mysql", urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) }))
}

// pkg begins the errors of the backend's URL grammar.
const pkg = "mysqllock"

// Config is what a mysql:// URL says: the handle to open, and the backend's
// options.
type Config struct {
	// Driver is go-sql-driver/mysql's configuration: server, credentials,
	// database and DSN parameters. Its Timeout (the dial timeout) is
	// DefaultConnectTimeout unless the URL sets "timeout", and its
	// InterpolateParams true unless the URL sets it.
	Driver *mysql.Config
	// MaxOpenConns is the handle's sql.DB.SetMaxOpenConns: the most locks
	// held at once; 0 is unlimited.
	MaxOpenConns int
	// Options are those the URL's parameters set; Open applies them before
	// its own.
	Options []Option
}

// ParseURL reads a mysql:// URL without connecting:
//
//	mysql://user:password@host:port/database?param=value
//
// Its parameters are mysqllock's own:
//
//	request_timeout=5s            WithRequestTimeout
//	keepalive=1s                  WithKeepalive
//	pool_wait=1s                  WithPoolWait
//	kill_on_force_release=true    WithKillOnForceRelease
//	max_open_conns=N              Config.MaxOpenConns (default 0, unlimited)
//
// and go-sql-driver/mysql's DSN parameters (timeout, tls,
// interpolateParams, ...). Any other, which the driver would send to the
// server as a system variable, is an error matching
// driver.ErrInvalidOption, as is an invalid value.
func ParseURL(u *url.URL) (Config, error) {
	if u.Scheme != "mysql" {
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want mysql", u.Scheme)
	}
	var cfg Config
	r := urlq.New(pkg, u.Query())
	for _, p := range []struct {
		name string
		with func(time.Duration) Option
	}{{"request_timeout", WithRequestTimeout}, {"keepalive", WithKeepalive}, {"pool_wait", WithPoolWait}} {
		var d time.Duration
		if r.Duration(p.name, &d) {
			cfg.Options = append(cfg.Options, p.with(d))
		}
	}
	var kill bool
	if r.Bool("kill_on_force_release", &kill) {
		cfg.Options = append(cfg.Options, WithKillOnForceRelease(kill))
	}
	r.Func("max_open_conns", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return errors.New("want 0 (unlimited) or more")
		}
		cfg.MaxOpenConns = n
		return nil
	})
	rest := r.Rest()
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	if _, err := newConfig(cfg.Options); err != nil {
		return Config{}, err
	}
	var err error
	if cfg.Driver, err = mysqlurl.Parse(pkg, u, rest); err != nil {
		return Config{}, err
	}
	if cfg.Driver.Timeout == 0 {
		cfg.Driver.Timeout = DefaultConnectTimeout
	}
	if !rest.Has("interpolateParams") {
		cfg.Driver.InterpolateParams = true
	}
	return cfg, nil
}

// Open returns a backend over a handle of its own on rawURL (see
// ParseURL), closed by Close, keeping up to 16 idle connections. opts
// apply after the URL's. Open checks the server with a ping bounded by ctx
// and the request timeout, so an unreachable server fails here, naming the
// dial error. A bad URL or parameter fails with an error matching
// driver.ErrInvalidOption and opens nothing.
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
	connector, err := mysql.NewConnector(cfg.Driver)
	if err != nil {
		return nil, urlq.Invalidf(pkg, "parameters", "%w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(16)
	b, err := New(db, append(slices.Clip(cfg.Options), opts...)...)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	b.ownDB = true
	pctx, cancel := context.WithTimeout(ctx, b.opts.RequestTimeout)
	defer cancel()
	if err := db.PingContext(pctx); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("mysqllock: connect: %w", err)
	}
	return b, nil
}
