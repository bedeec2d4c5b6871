package remotelock

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

func init() {
	distlock.Register("distlock", open)
	distlock.Register("distlocks", open)
}

// TokenEnv is the environment variable Open reads the bearer token from
// when the URL names no token_file.
const TokenEnv = "DISTLOCK_TOKEN"

// open builds a backend for distlock://HOST:PORT[/BASE]?params (plain HTTP)
// or distlocks://... (HTTPS) and checks that the service answers.
func open(ctx context.Context, u *url.URL) (driver.Backend, error) {
	if u.Host == "" {
		return nil, fmt.Errorf("remotelock: the URL %q names no host: %w", driver.RedactURL(u), driver.ErrInvalidOption)
	}
	if u.User != nil {
		return nil, fmt.Errorf("remotelock: the URL %q carries credentials: %w: give the token in token_file or $%s", driver.RedactURL(u), driver.ErrInvalidOption, TokenEnv)
	}
	p, err := urlParams(u.Query())
	if err != nil {
		return nil, err
	}
	opts := p.opts
	if p.tokenFile != "" {
		tok, err := readToken(p.tokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, WithToken(tok))
	} else if tok := strings.TrimSpace(os.Getenv(TokenEnv)); tok != "" {
		opts = append(opts, WithToken(tok))
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	var tlsConfig *tls.Config
	if u.Scheme == "distlocks" {
		scheme = "https"
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if p.caFile != "" {
			pool, err := readCAs(p.caFile)
			if err != nil {
				return nil, err
			}
			tlsConfig.RootCAs = pool
		}
	} else if p.caFile != "" {
		return nil, fmt.Errorf("remotelock: URL parameter ca_file: %w: only distlocks:// uses TLS", driver.ErrInvalidOption)
	}
	if c.grpc && scheme == "http" && !p.h2c {
		return nil, fmt.Errorf("remotelock: URL parameters protocol=grpc and h2c=false: %w: gRPC needs HTTP/2", driver.ErrInvalidOption)
	}
	base, err := parseBase((&url.URL{Scheme: scheme, Host: u.Host, Path: u.Path}).String())
	if err != nil {
		return nil, err
	}
	t, conns := newTransport(scheme == "http" && p.h2c, tlsConfig, c.requestTimeout)
	b := newBackend(&http.Client{Transport: t}, conns, base.String(), c)
	if err := b.probe(ctx); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

// params are the query parameters of a distlock:// URL.
type params struct {
	opts      []Option
	tokenFile string
	caFile    string
	h2c       bool
}

// urlParams reads the query parameters of a distlock:// URL: token_file,
// ca_file, request_timeout, max_wait, protocol (connect or grpc), h2c and
// watch_loss (booleans). Any other, or one given twice, is an error.
func urlParams(q url.Values) (params, error) {
	p := params{h2c: true}
	for name, vs := range q {
		if len(vs) != 1 {
			return params{}, fmt.Errorf("remotelock: URL parameter %s given %d times: %w", name, len(vs), driver.ErrInvalidOption)
		}
		v := vs[0]
		bad := func(why any) error {
			return fmt.Errorf("remotelock: URL parameter %s=%q: %w: %v", name, v, driver.ErrInvalidOption, why)
		}
		switch name {
		case "token_file", "ca_file":
			if v == "" {
				return params{}, bad("empty")
			}
			if name == "token_file" {
				p.tokenFile = v
			} else {
				p.caFile = v
			}
		case "request_timeout", "max_wait":
			d, err := time.ParseDuration(v)
			if err != nil {
				return params{}, bad(err)
			}
			if name == "request_timeout" {
				p.opts = append(p.opts, WithRequestTimeout(d))
			} else {
				p.opts = append(p.opts, WithMaxWait(d))
			}
		case "protocol":
			switch v {
			case "connect":
			case "grpc":
				p.opts = append(p.opts, WithGRPC())
			default:
				return params{}, bad("want connect or grpc")
			}
		case "h2c", "watch_loss":
			on, err := strconv.ParseBool(v)
			if err != nil {
				return params{}, bad(err)
			}
			if name == "h2c" {
				p.h2c = on
			} else if on {
				p.opts = append(p.opts, WithLossWatch())
			}
		default:
			return params{}, fmt.Errorf("remotelock: unknown URL parameter %s: %w", name, driver.ErrInvalidOption)
		}
	}
	return p, nil
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
		return fmt.Errorf("remotelock: connect %s: %w", b.base, err)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return fmt.Errorf("remotelock: connect %s: %w", b.base, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	return nil
}
