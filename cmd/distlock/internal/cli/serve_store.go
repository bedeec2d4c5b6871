package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/cmd/distlock/internal/embedetcd"
	"github.com/distlock/distlock/driver"
)

// storeSpec is the store serve runs on: a store URL, or else the embedded
// etcd in a data directory.
type storeSpec struct {
	url string // --backend or $DISTLOCK_BACKEND
	dir string // the data directory, when url is empty
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
	if s.url != "" {
		if u, err := url.Parse(s.url); err == nil && (u.Scheme == "distlock" || u.Scheme == "distlocks") {
			return s, usage("serve: the store cannot be a distlock:// service (the service would call itself); give a store such as etcd:// or redis://")
		}
	}
	return s, nil
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
	describe string          // for the banner and the log
}

// open opens the store: distlock.Open over the URL, or the embedded etcd
// (started in DIR/etcd, DIR created 0700) under an etcdlock backend.
func (s storeSpec) open(ctx context.Context, log *slog.Logger, opts ...distlock.ClientOption) (*serveStore, error) {
	if s.url != "" {
		c, err := openClient(ctx, &globals{backend: s.url}, "serve", opts...)
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
			return nil, exit(ExitUnavailable, &opError{op: "serve: the store " + driver.Redact(s.url) + " does not answer", err: err})
		}
		if k, ok := c.Backend().(interface{ KeyIDs() pglock.KeyIDs }); ok && k.KeyIDs() == pglock.KeyIDsFNV1a {
			log.Warn("this PostgreSQL database maps keys to lock ids with FNV-1a, which a caller can collide: "+
				"one tenant can block another's key and see whether it is held. Move it to SHA-256 ids once every "+
				"client is upgraded (docs/sql.md, \"Keys\")", "store", driver.Redact(s.url), "key_ids", k.KeyIDs())
		}
		return &serveStore{client: c, describe: driver.Redact(s.url)}, nil
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, exit(ExitUsage, &opError{op: "serve: --data-dir", err: err})
	}
	e, err := embedetcd.Start(ctx, filepath.Join(s.dir, "etcd"), log)
	if err != nil {
		return nil, exit(ExitUnavailable, &opError{op: "serve", err: err})
	}
	b, err := e.Backend(ctx, log)
	if err != nil {
		_ = e.Close()
		return nil, exit(ExitUnavailable, &opError{op: "serve: embedded etcd", err: err})
	}
	return &serveStore{client: distlock.New(b, opts...), etcd: e, describe: "embedded etcd in " + e.Dir()}, nil
}

// failed returns a channel that receives an error if the embedded store
// fails while serve runs; nil (never ready) for a store URL.
func (s *serveStore) failed() <-chan error {
	if s.etcd == nil {
		return nil
	}
	return s.etcd.Err()
}

// close closes the client (which releases nothing it did not lock itself:
// the service's locks are its clients') and then the embedded store.
func (s *serveStore) close(log *slog.Logger) {
	var errs []error
	if err := s.client.Close(); err != nil {
		errs = append(errs, err)
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
