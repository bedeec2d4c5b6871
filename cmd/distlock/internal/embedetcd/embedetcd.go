// Package embedetcd runs a single-node etcd inside the distlock process: the
// default store of `distlock serve`. It is a real etcd (raft, a write-ahead
// log, fsync on every commit), so what it stores survives a crash or a
// restart over the same directory: keys, leases and revisions, and with them
// the locks, their leases and their fences.
//
// Clients reach it through a unix socket inside the data directory, which
// Start creates with mode 0700: only the service's user can talk to the store
// behind the service's back. The raft peer port, which a single node needs to
// exist but never uses, listens on a free loopback port chosen at each start.
// A directory serves one process at a time: Start takes an exclusive lock on
// it and refuses a directory another process uses.
package embedetcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sys/unix"
)

// DefaultReadyTimeout bounds how long Start waits for the store to be ready
// (replaying its log, electing itself) when ctx has no earlier deadline.
const DefaultReadyTimeout = time.Minute

// socketName is the client socket's file name inside the data directory.
const socketName = "etcd.sock"

// lockName is the file Start locks so that two processes never share a
// directory.
const lockName = "distlock.lock"

// maxSocketPath is the longest socket path Linux accepts (sun_path is 108
// bytes with its terminating NUL) with a margin; a longer data directory
// gets a loopback TCP port instead.
const maxSocketPath = 100

// closeAfterFatal bounds how long Close waits for etcd to stop once it
// logged a fatal error: the goroutine that logged it was ended, and what
// waited for it may wait forever.
const closeAfterFatal = 10 * time.Second

// Etcd is a running embedded etcd. Create it with Start; Close stops it.
type Etcd struct {
	e         *embed.Etcd
	dir       string
	endpoints []string
	lock      *os.File
	closing   *atomic.Bool // tells the log core that Close began
	fatal     *fatalHook
	forwarded chan struct{} // closed when etcd's error channel was drained

	closeOnce sync.Once
	closeErr  error
}

// Start starts a single-node etcd whose data lives in dir (created with mode
// 0700 if missing) and waits until it serves requests, within ctx and
// DefaultReadyTimeout. An existing dir is reopened as it was: every key,
// lease and revision is kept. logger receives etcd's warnings and errors;
// nil discards them.
//
// Start fails if another process uses dir, if the store does not become
// ready in time, or if etcd refuses the directory (a corrupt log, say) or
// logs a fatal error while it starts; the error names dir.
//
// etcd ends the process (os.Exit(1)) when it logs a fatal error, such as a
// write-ahead log it cannot write for want of file descriptors. The store
// started here never does: the error goes to the function given to
// OnFatal, else to Err, and the goroutine that logged it ends.
func Start(ctx context.Context, dir string, logger *slog.Logger) (*Etcd, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: data dir %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("embedetcd: data dir %s: %w", abs, err)
	}
	lock, err := lockDir(abs)
	if err != nil {
		return nil, err
	}
	e, err := start(ctx, abs, logger)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	e.lock = lock
	return e, nil
}

// lockDir takes an exclusive, non-blocking lock on dir's lock file. The
// lock ends with the process, so a crash never leaves a directory locked.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: data dir %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("embedetcd: data dir %s is in use by another process (%s is locked)", dir, path)
		}
		return nil, fmt.Errorf("embedetcd: lock data dir %s: %w", dir, err)
	}
	return f, nil
}

// start configures and starts etcd in dir, trying other ports, up to three
// times in all, if a port chosen free was taken meanwhile.
func start(ctx context.Context, dir string, logger *slog.Logger) (*Etcd, error) {
	var err error
	for range 3 {
		var e *Etcd
		e, err = startOnce(ctx, dir, logger)
		if err == nil || !addrInUse(err) {
			return e, err
		}
	}
	return nil, err
}

func startOnce(ctx context.Context, dir string, logger *slog.Logger) (*Etcd, error) {
	closing := new(atomic.Bool)
	fatal := newFatalHook()
	cfg, err := config(dir, logger, closing, fatal)
	if err != nil {
		return nil, err
	}
	ee, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("embedetcd: start in %s: %w", dir, err)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultReadyTimeout)
	defer cancel()
	select {
	case <-ee.Server.ReadyNotify():
	case err := <-ee.Err():
		closing.Store(true)
		stopEtcd(ee, fatal)
		return nil, fmt.Errorf("embedetcd: start in %s: %w", dir, err)
	case err := <-fatal.errc:
		closing.Store(true)
		stopEtcd(ee, fatal)
		return nil, fmt.Errorf("embedetcd: start in %s: %w", dir, err)
	case <-ctx.Done():
		closing.Store(true)
		stopEtcd(ee, fatal)
		return nil, fmt.Errorf("embedetcd: start in %s: not ready: %w", dir, context.Cause(ctx))
	}
	eps := make([]string, len(cfg.AdvertiseClientUrls))
	for i, u := range cfg.AdvertiseClientUrls {
		eps[i] = u.String()
	}
	e := &Etcd{e: ee, dir: dir, endpoints: eps, closing: closing, fatal: fatal, forwarded: make(chan struct{})}
	// Err tells of both: etcd's own errors, and fatal ones (see fatalHook).
	go func() {
		defer close(e.forwarded)
		for err := range ee.Err() { // closed by ee.Close
			fatal.report(err)
		}
	}()
	return e, nil
}

// stopEtcd stops ee and waits for it, at most closeAfterFatal once it
// logged a fatal error, and reports whether it stopped.
func stopEtcd(ee *embed.Etcd, fatal *fatalHook) bool {
	if !fatal.happened.Load() {
		ee.Close()
		return true
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ee.Close()
	}()
	select {
	case <-stopped:
		return true
	case <-time.After(closeAfterFatal):
		return false
	}
}

// addrInUse reports whether err is a listener's port taken by another.
func addrInUse(err error) bool {
	return errors.Is(err, unix.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

// config returns the embedded server's configuration for dir. Its log
// records go to logger; closing tells them apart once Close began; its
// fatal records go to fatal as well, instead of ending the process.
func config(dir string, logger *slog.Logger, closing *atomic.Bool, fatal *fatalHook) (*embed.Config, error) {
	cfg := embed.NewConfig()
	cfg.Name = "distlock"
	cfg.Dir = dir
	cfg.InitialClusterToken = "distlock-embedded"
	client, err := clientURL(dir)
	if err != nil {
		return nil, err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort))}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Only etcd's gRPC API is used; its JSON gateway would be one more
	// door into the store.
	cfg.EnableGRPCGateway = false
	// Keep five minutes of history, as Kubernetes has its etcd do: watches
	// resume within seconds and fences need none. Without compaction the
	// store's size grows with every lock taken, and until one, etcd keeps
	// the name of every deleted queue entry in its index, where each range
	// read and each compare on a directory walks it: behind 5 000 waiters
	// on one key, an hour of them took a third of the process's CPU.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "5m"
	core := &slogCore{l: logger, level: zapcore.WarnLevel, closing: closing}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(core, zap.WithFatalHook(fatal)))
	return cfg, nil
}

// clientURL returns the client URL: a unix socket in dir, or a free
// loopback TCP port if dir is too long for a socket path.
func clientURL(dir string) (url.URL, error) {
	sock := filepath.Join(dir, socketName)
	if len(sock) <= maxSocketPath {
		return url.URL{Scheme: "unix", Path: sock}, nil
	}
	port, err := freePort()
	if err != nil {
		return url.URL{}, err
	}
	return url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}, nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("embedetcd: find a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Endpoints returns the client URLs of the store, for clientv3.Config
// (unix:///DIR/etcd.sock, or http://127.0.0.1:PORT for a long DIR).
func (e *Etcd) Endpoints() []string { return append([]string(nil), e.endpoints...) }

// Dir returns the absolute path of the data directory.
func (e *Etcd) Dir() string { return e.dir }

// Err returns a channel that receives an error if the store fails after it
// started: an error of its servers, or a *FatalError if etcd logged one and
// no function was given to OnFatal. A service should stop then, as its
// store is gone. The channel holds the first error; later ones are dropped.
func (e *Etcd) Err() <-chan error { return e.fatal.errc }

// OnFatal makes fn what a fatal error of etcd calls, from then on: an
// error etcd does not go on after (its log or database cannot be written,
// say), which would otherwise end the process with exit code 1. fn runs in
// the goroutine of etcd that logged the error, which ends when fn returns,
// so the store no longer works: fn should stop the process, or tell it to
// stop and Close the store. Without OnFatal, the error goes to Err.
func (e *Etcd) OnFatal(fn func(*FatalError)) { e.fatal.fn.Store(&fn) }

// Close stops the store, waiting for the requests it is serving, and lets
// the directory go. What it stores stays in the directory for the next
// Start. Closing twice is harmless. After a fatal error, Close waits for
// etcd at most 10s, then gives up with an error and leaves the directory
// locked until the process ends.
func (e *Etcd) Close() error {
	e.closeOnce.Do(func() {
		e.closing.Store(true)
		if !stopEtcd(e.e, e.fatal) {
			// The directory stays locked: etcd may still write to it.
			e.closeErr = fmt.Errorf("embedetcd: etcd in %s did not stop within %v of its fatal error", e.dir, closeAfterFatal)
			return
		}
		<-e.forwarded
		if err := e.lock.Close(); err != nil {
			e.closeErr = fmt.Errorf("embedetcd: unlock data dir %s: %w", e.dir, err)
		}
	})
	return e.closeErr
}
