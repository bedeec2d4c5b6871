package remotelock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	open := urlq.Opener(func(ctx context.Context, u *url.URL) (*Backend, error) { return openURL(ctx, u) })
	distlock.Register("distlock", open)
	distlock.Register("distlocks", open)
}

// TokenEnv is the environment variable Open reads the bearer token from
// when the URL names no token_file.
const TokenEnv = "DISTLOCK_TOKEN"

// pkg begins the errors of the backend's URL grammar.
const pkg = "remotelock"

// Config is what a distlock:// or distlocks:// URL says: where the service
// is, how to reach it, and the backend's options.
type Config struct {
	// Base is the service's base URL, http:// or https://, with the path
	// prefix BASE.
	Base string
	// TokenFile is the file of the bearer token; empty for
	// $DISTLOCK_TOKEN (TokenEnv). Open reads it.
	TokenFile string
	// CAFile is the file of the PEM certificates trusted for https://;
	// empty for the system's roots. Open reads it.
	CAFile string
	// H2C is true for HTTP/2 with prior knowledge over http:// (the
	// default), false for HTTP/1.1.
	H2C bool
	// Options are those the URL's parameters set; Open applies them before
	// its own.
	Options []Option
}

// ParseURL reads a distlock:// or distlocks:// URL (see the package doc)
// without connecting or reading a file. A URL that is not one, or a
// parameter that is unknown or invalid, is an error matching
// driver.ErrInvalidOption.
func ParseURL(u *url.URL) (Config, error) {
	scheme := map[string]string{"distlock": "http", "distlocks": "https"}[u.Scheme]
	switch {
	case scheme == "":
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want distlock or distlocks", u.Scheme)
	case u.Host == "":
		return Config{}, urlq.Invalidf(pkg, "host", "none: want %s://HOST:PORT[/BASE]", u.Scheme)
	case u.User != nil:
		return Config{}, urlq.Invalidf(pkg, "user", "a URL carries no credentials: give the token in token_file or $%s", TokenEnv)
	}
	cfg := Config{H2C: true}
	r := urlq.New(pkg, u.Query())
	r.String("token_file", &cfg.TokenFile)
	r.String("ca_file", &cfg.CAFile)
	var d time.Duration
	if r.Duration("request_timeout", &d) {
		cfg.Options = append(cfg.Options, WithRequestTimeout(d))
	}
	if r.Duration("max_wait", &d) {
		cfg.Options = append(cfg.Options, WithMaxWait(d))
	}
	var grpc bool
	r.Func("protocol", func(v string) error {
		if v != "connect" && v != "grpc" {
			return errors.New("want connect or grpc")
		}
		grpc = v == "grpc"
		return nil
	})
	if grpc {
		cfg.Options = append(cfg.Options, WithGRPC())
	}
	r.Bool("h2c", &cfg.H2C)
	var watch bool
	if r.Bool("watch_loss", &watch) && watch {
		cfg.Options = append(cfg.Options, WithLossWatch())
	}
	if err := r.Done(); err != nil {
		return Config{}, err
	}
	switch {
	case cfg.CAFile != "" && scheme == "http":
		return Config{}, r.Error("ca_file", "", errors.New("only distlocks:// uses TLS"))
	case grpc && scheme == "http" && !cfg.H2C:
		return Config{}, r.Error("protocol", "grpc", errors.New("gRPC needs HTTP/2, which h2c=false turns off"))
	}
	if _, err := newConfig(cfg.Options); err != nil {
		return Config{}, err
	}
	base, err := parseBase((&url.URL{Scheme: scheme, Host: u.Host, Path: u.Path}).String())
	if err != nil {
		return Config{}, err
	}
	cfg.Base = base.String()
	return cfg, nil
}

// Open calls the service rawURL names (see the package doc and ParseURL)
// through an HTTP client of its own, which Close closes. It reads the
// token and the certificates, then checks that the service answers (a GET
// of BASE/healthz) within ctx and the request timeout. opts apply after the
// URL's.
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
	all := slices.Clip(cfg.Options)
	if cfg.TokenFile != "" {
		tok, err := readToken(cfg.TokenFile)
		if err != nil {
			return nil, err
		}
		all = append(all, WithToken(tok))
	} else if tok := strings.TrimSpace(os.Getenv(TokenEnv)); tok != "" {
		all = append(all, WithToken(tok))
	}
	c, err := newConfig(append(all, opts...))
	if err != nil {
		return nil, err
	}
	https := strings.HasPrefix(cfg.Base, "https:")
	var tlsConfig *tls.Config
	if https {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			if tlsConfig.RootCAs, err = readCAs(cfg.CAFile); err != nil {
				return nil, err
			}
		}
	}
	t, conns := newTransport(!https && cfg.H2C, tlsConfig, c.requestTimeout)
	b := newBackend(&http.Client{Transport: t}, conns, cfg.Base, c)
	if err := b.probe(ctx); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// readToken reads a bearer token from a file: its content without
// surrounding white space. The token never appears in an error.
func readToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("remotelock: token_file: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("remotelock: token_file %s: %w: empty", path, driver.ErrInvalidOption)
	}
	if strings.ContainsAny(tok, "\r\n") {
		return "", fmt.Errorf("remotelock: token_file %s: %w: more than one line", path, driver.ErrInvalidOption)
	}
	return tok, nil
}

// readCAs reads the PEM certificates of ca_file.
func readCAs(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("remotelock: ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("remotelock: ca_file %s: %w: no PEM certificate in it", path, driver.ErrInvalidOption)
	}
	return pool, nil
}

// probe checks that the service answers an HTTP request, within ctx and
// the request timeout. Any HTTP answer will do (a proxy may route only the
// API): it is the link that is checked, not the service's health.
func (b *Backend) probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.base+"/healthz", nil)
	if err != nil {
		return fmt.Errorf("remotelock: connect: %w", err)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the request's URL: the caller knows it
		}
		return fmt.Errorf("remotelock: connect: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	return nil
}
