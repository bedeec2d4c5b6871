package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/cmd/distlock/internal/embedetcd"
	"github.com/distlock/distlock/cmd/distlock/internal/server"
	"github.com/distlock/distlock/driver"
)

// storeSpec is the store serve runs on: a store URL, or else the embedded
// etcd in a data directory; and the stores of the keys --route sends
// elsewhere.
type storeSpec struct {
	url    string // --backend or $DISTLOCK_BACKEND
	dir    string // the data directory, when url is empty
	routes []routeSpec
}

// routeSpec is one --route: the store keys under prefix live in the store
// at url.
type routeSpec struct {
	prefix, url string
}

// storeSpec returns the store the flags name. --backend and --data-dir
// exclude each other; an explicit --data-dir wins over $DISTLOCK_BACKEND.
func (f *serveFlags) storeSpec(cmd *cobra.Command, g *globals) (storeSpec, error) {
	dirSet := cmd.Flags().Changed("data-dir")
	env := os.Getenv("DISTLOCK_BACKEND")
	var s storeSpec
	switch {
	case g.backend != "" && dirSet:
		return s, usage("serve: --backend and --data-dir: choose one (--data-dir is the embedded store's)")
	case dirSet && f.dataDir == "":
		return s, usage("serve: --data-dir is empty")
	case dirSet:
		s.dir = f.dataDir
	case g.backend != "":
		s.url = g.backend
	case env != "":
		s.url = env
	default:
		dir, err := defaultDataDir()
		if err != nil {
			return s, exit(ExitUsage, &opError{op: "serve", err: err})
		}
		s.dir = dir
	}
	if s.url != "" && isService(s.url) {
		return s, usage("serve: the store cannot be a distlock:// service (the service would call itself); give a store such as etcd:// or redis://")
	}
	var err error
	s.routes, err = parseRoutes(f.routes)
	return s, err
}

// spansTenants reports whether prefix ends inside a tenant's name
// (tenants/acme), so that it matches the keys of acme2 too.
func spansTenants(prefix string) bool {
	_, rest, _ := strings.Cut(prefix, "/")
	return rest != "" && !strings.Contains(rest, "/")
}

// isService reports whether rawURL names a distlock service.
func isService(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && (u.Scheme == "distlock" || u.Scheme == "distlocks")
}

// parseRoutes checks the --route flags: PREFIX=URL each, PREFIX a prefix of
// the service's store keys (tenants/<tenant>/… or sessions/<tenant>/…),
// each PREFIX once.
func parseRoutes(flags []string) ([]routeSpec, error) {
	var routes []routeSpec
	seen := map[string]bool{}
	for _, f := range flags {
		prefix, u, ok := strings.Cut(f, "=")
		switch {
		case !ok || prefix == "" || u == "":
			return nil, usage("serve: --route %q: want PREFIX=URL, such as tenants/acme/=etcd://10.0.1.1:2379", driver.Redact(f))
		case !strings.HasPrefix(prefix, "tenants/") && !strings.HasPrefix(prefix, "sessions/"):
			return nil, usage("serve: --route %q: the prefix matches no key of the service, which keeps tenant T's key K as tenants/T/K and its sessions under sessions/T/", prefix)
		case spansTenants(prefix):
			return nil, usage("serve: --route %q: the prefix would take in every tenant whose name begins so; end the tenant with a slash (%s/)", prefix, prefix)
		case seen[prefix]:
			return nil, usage("serve: --route %q is given twice", prefix)
		case isService(u):
			return nil, usage("serve: --route %q: the store cannot be a distlock:// service", prefix)
		}
		seen[prefix] = true
		routes = append(routes, routeSpec{prefix: prefix, url: u})
	}
	return routes, nil
}

// defaultDataDir returns $XDG_STATE_HOME/distlock, else
// ~/.local/state/distlock.
func defaultDataDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "distlock"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory for the default data dir: give --data-dir: %w", err)
	}
	return filepath.Join(home, ".local", "state", "distlock"), nil
}

// The store's first answer at start: an Inspect of a key no one holds,
// within startProbeTimeout.
const (
	startProbeKey     = "distlock/serve/start-probe"
	startProbeTimeout = 15 * time.Second
)

// serveStore is the open store of a running serve.
type serveStore struct {
	client   *distlock.Client
	etcd     *embedetcd.Etcd // the embedded store, or nil
	routes   []server.Route  // the --route stores
	describe string          // for the banner and the log
}

// open opens the store, distlock.Open over the URL or the embedded etcd
// (started in DIR/etcd, DIR created 0700) under an etcdlock backend, and
// the store of each route (one client for routes to the same URL).
func (s storeSpec) open(ctx context.Context, log *slog.Logger, opts ...distlock.ClientOption) (_ *serveStore, err error) {
	st := &serveStore{}
	defer func() {
		if err != nil {
			st.close(log)
		}
	}()
	if s.url != "" {
		if st.client, err = openURL(ctx, s.url, log, opts); err != nil {
			return nil, err
		}
		st.describe = driver.Redact(s.url)
	} else if err = s.openEmbedded(ctx, st, log, opts); err != nil {
		return nil, err
	}
	byURL := map[string]*distlock.Client{}
	for _, r := range s.routes {
		c := byURL[r.url]
		if c == nil {
			if c, err = openURL(ctx, r.url, log, opts); err != nil {
				return nil, err
			}
			byURL[r.url] = c
		}
		st.routes = append(st.routes, server.Route{Prefix: r.prefix, Client: c})
		st.describe += fmt.Sprintf("; %s in %s", r.prefix, driver.Redact(r.url))
	}
	return st, nil
}

// openURL opens the client of the store at rawURL and checks that the store
// answers.
func openURL(ctx context.Context, rawURL string, log *slog.Logger, opts []distlock.ClientOption) (*distlock.Client, error) {
	c, err := openClient(ctx, &globals{backend: rawURL}, "serve", opts...)
	if err != nil {
		return nil, err
	}
	// Some stores connect lazily (a PostgreSQL pool): one that does not
	// answer now is refused now, as one whose dial fails is.
	pctx, cancel := context.WithTimeout(ctx, startProbeTimeout)
	_, err = c.Inspect(pctx, startProbeKey)
	cancel()
	if err != nil {
		_ = c.Close()
		return nil, exit(ExitUnavailable, &opError{op: "serve: the store " + driver.Redact(rawURL) + " does not answer", err: err})
	}
	if k, ok := c.Backend().(interface{ KeyIDs() pglock.KeyIDs }); ok && k.KeyIDs() == pglock.KeyIDsFNV1a {
		log.Warn("this PostgreSQL database maps keys to lock ids with FNV-1a, which a caller can collide: "+
			"one tenant can block another's key and see whether it is held. Move it to SHA-256 ids once every "+
			"client is upgraded (docs/sql.md, \"Keys\")", "store", driver.Redact(rawURL), "key_ids", k.KeyIDs())
	}
	return c, nil
}

// openEmbedded starts the embedded etcd in s.dir and opens st's client on
// it.
func (s storeSpec) openEmbedded(ctx context.Context, st *serveStore, log *slog.Logger, opts []distlock.ClientOption) error {
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return exit(ExitUsage, &opError{op: "serve: --data-dir", err: err})
	}
	e, err := embedetcd.Start(ctx, filepath.Join(s.dir, "etcd"), log)
	if err != nil {
		return exit(ExitUnavailable, &opError{op: "serve", err: err})
	}
	st.etcd, st.describe = e, "embedded etcd in "+e.Dir()
	b, err := e.Backend(ctx, log)
	if err != nil {
		return exit(ExitUnavailable, &opError{op: "serve: embedded etcd", err: err})
	}
	st.client = distlock.New(b, opts...)
	return nil
}

// failed returns a channel that receives an error if the embedded store
// fails while serve runs; nil (never ready) for a store URL.
func (s *serveStore) failed() <-chan error {
	if s.etcd == nil {
		return nil
	}
	return s.etcd.Err()
}

// close closes the clients (which release nothing they did not lock
// themselves: the service's locks are its clients') and then the embedded
// store.
func (s *serveStore) close(log *slog.Logger) {
	var errs []error
	clients := []*distlock.Client{s.client}
	for _, r := range s.routes {
		if !slices.Contains(clients, r.Client) {
			clients = append(clients, r.Client)
		}
	}
	for _, c := range clients {
		if c == nil {
			continue
		}
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.etcd != nil {
		if err := s.etcd.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.Warn("close the store", "err", err)
	}
}
