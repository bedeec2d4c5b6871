package embedetcd

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testContext returns a context that ends with the test or after d.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// dial returns an etcd client of e, closed when the test ends.
func dial(t *testing.T, e *Etcd) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("dial %v: %v", e.Endpoints(), err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// recorder is a slog handler that keeps the records it gets.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec)
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) below(level slog.Level) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var msgs []string
	for _, rec := range r.records {
		if rec.Level < level {
			msg := rec.Message
			rec.Attrs(func(a slog.Attr) bool {
				msg += " " + a.String()
				return true
			})
			msgs = append(msgs, msg)
		}
	}
	return msgs
}

// TestRestartKeepsKeysLeasesAndRevisions starts the store, writes a key on
// a lease, stops it and starts it again over the same directory: the key,
// its create revision (a lock's fence), its lease and the revision counter
// are all still there, and the lease is still renewable.
func TestRestartKeepsKeysLeasesAndRevisions(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	dir := filepath.Join(t.TempDir(), "data")
	rec := &recorder{}
	e, err := Start(ctx, dir, slog.New(rec))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
	if eps := e.Endpoints(); len(eps) != 1 || !strings.HasPrefix(eps[0], "unix://") {
		t.Errorf("endpoints %v: want one unix socket", eps)
	}
	cli := dial(t, e)
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	put, err := cli.Put(ctx, "locks/a", "holder", clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_ = cli.Close()

	e2, err := Start(ctx, dir, slog.New(rec))
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	defer e2.Close()
	cli2 := dial(t, e2)
	get, err := cli2.Get(ctx, "locks/a")
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) != 1 {
		t.Fatalf("after restart: %d keys, want the one written before", len(get.Kvs))
	}
	kv := get.Kvs[0]
	if string(kv.Value) != "holder" || kv.CreateRevision != put.Header.Revision || clientv3.LeaseID(kv.Lease) != lease.ID {
		t.Errorf("after restart: value %q create revision %d lease %x; want %q %d %x",
			kv.Value, kv.CreateRevision, kv.Lease, "holder", put.Header.Revision, lease.ID)
	}
	if get.Header.Revision < put.Header.Revision {
		t.Errorf("revision went back from %d to %d", put.Header.Revision, get.Header.Revision)
	}
	ttl, err := cli2.TimeToLive(ctx, lease.ID)
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("lease after restart: ttl %v, err %v", ttl, err)
	}
	if _, err := cli2.KeepAliveOnce(ctx, lease.ID); err != nil {
		t.Errorf("renew the lease after restart: %v", err)
	}
	put2, err := cli2.Put(ctx, "locks/b", "next")
	if err != nil {
		t.Fatal(err)
	}
	if put2.Header.Revision <= put.Header.Revision {
		t.Errorf("a write after restart got revision %d, not above %d", put2.Header.Revision, put.Header.Revision)
	}
	if msgs := rec.below(slog.LevelWarn); len(msgs) > 0 {
		t.Errorf("etcd logged below warn: %q", msgs)
	}
}

// TestQuietStartAndClose starts and stops the store over a fresh directory
// without a single log record: what etcd says at warn about its embedded
// settings, or as its listeners close, is not for the operator.
func TestQuietStartAndClose(t *testing.T) {
	rec := &recorder{}
	e, err := Start(testContext(t, 2*time.Minute), filepath.Join(t.TempDir(), "data"), slog.New(rec))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if msgs := rec.below(slog.LevelError + 1); len(msgs) > 0 {
		t.Errorf("etcd logged %q", msgs)
	}
}

// TestDirInUse refuses a second store over a directory in use, naming it,
// and lets it be used once the first has stopped.
func TestDirInUse(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	dir := t.TempDir()
	e, err := Start(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, err := Start(ctx, dir, nil); err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second Start over %s: %v; want in use, naming the directory", dir, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e2, err := Start(ctx, dir, nil)
	if err != nil {
		t.Fatalf("Start after Close: %v", err)
	}
	if err := e2.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLongDirUsesTCP falls back to a loopback TCP port when the socket path
// would be too long for the kernel.
func TestLongDirUsesTCP(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", maxSocketPath))
	e, err := Start(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if eps := e.Endpoints(); len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") {
		t.Fatalf("endpoints %v: want one loopback TCP URL", eps)
	}
	if _, err := dial(t, e).Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
}

// TestStartCancelled gives up when its context ends before the store is
// ready, and leaves the directory usable.
func TestStartCancelled(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if e, err := Start(ctx, dir, nil); err == nil {
		_ = e.Close()
		t.Fatal("Start with a cancelled context succeeded")
	}
	e, err := Start(testContext(t, 2*time.Minute), dir, nil)
	if err != nil {
		t.Fatalf("Start after a cancelled one: %v", err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWarningsReachTheLogger hands etcd's warnings to the slog logger as
// records of component etcd.
func TestWarningsReachTheLogger(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	l := slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	core := &slogCore{l: l, level: zap.WarnLevel}
	zap.New(core).With(zap.String("member", "m1")).Warn("slow fdatasync", zap.Duration("took", time.Second))
	zap.New(core).Info("not forwarded")
	zap.New(core).Warn("failed to apply request", zap.Error(errors.New("etcdserver: requested lease not found")))
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{`"level":"WARN"`, `"msg":"slow fdatasync"`, `"component":"etcd"`, `"member":"m1"`, `"took":"1s"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log %s: no %s", out, want)
		}
	}
	if strings.Contains(out, "not forwarded") {
		t.Errorf("an info record was forwarded: %s", out)
	}
	if strings.Contains(out, "failed to apply request") {
		t.Errorf("the revocation of an expired lease was logged: %s", out)
	}
}

// TestSchemaCheckBeforeBootstrapIsQuiet drops what etcd's storage version
// monitor says when it runs before the member has saved its term or
// configuration, as it may on a store's first start: the next check
// succeeds, and etcd's own tests ignore it. Any other failure of the
// check is logged.
func TestSchemaCheckBeforeBootstrapIsQuiet(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	l := slog.New(slog.NewJSONHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	log := zap.New(&slogCore{l: l, level: zap.WarnLevel})
	log.Warn("Failed to detect schema version", zap.Error(errors.New("missing term information")))
	log.Warn("Failed to detect schema version", zap.Error(errors.New("missing confstate information")))
	log.Error("failed to update storage version", zap.String("cluster-version", "3.7.0"),
		zap.Error(errors.New("cannot detect storage schema version: missing term information")))
	log.Error("failed to update storage version", zap.Error(errors.New("cannot detect storage schema version: missing confstate information")))
	log.Error("failed to update storage version", zap.Error(errors.New("disk I/O error")))
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if strings.Contains(out, "missing") {
		t.Errorf("a schema check before bootstrap was logged: %s", out)
	}
	if !strings.Contains(out, "disk I/O error") {
		t.Errorf("another failure of the schema check was dropped: %s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestFatalDoesNotExit logs a fatal error through etcd's own logger, as
// etcd does when it cannot go on (a WAL file it cannot purge for want of
// file descriptors, say): the process does not exit; without OnFatal the
// error reaches Err, with OnFatal it reaches the function given, and in
// both cases the record is logged and the code after the Fatal call never
// runs. The store then closes as usual.
func TestFatalDoesNotExit(t *testing.T) {
	rec := &recorder{}
	e, err := Start(testContext(t, 2*time.Minute), filepath.Join(t.TempDir(), "data"), slog.New(rec))
	if err != nil {
		t.Fatal(err)
	}
	cause := errors.New("open member/wal: too many open files")
	// fatal logs msg as fatal from a goroutine of its own, and reports
	// whether the call returned.
	fatal := func(msg string) (returned bool) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			e.e.GetLogger().Fatal(msg, zap.Error(cause), zap.String("path", "member/wal"))
			returned = true
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Fatal still runs after 10s")
		}
		return returned
	}
	check := func(how string, got error) {
		t.Helper()
		var fe *FatalError
		if !errors.As(got, &fe) {
			t.Fatalf("%s: %v (%T), want a *FatalError", how, got, got)
		}
		if want := "embedetcd: etcd failed: failed to purge wal file: " + cause.Error(); fe.Error() != want {
			t.Errorf("%s: %q, want %q", how, fe.Error(), want)
		}
		attrs := map[string]string{}
		for _, a := range fe.Attrs {
			attrs[a.Key] = a.Value.String()
		}
		if attrs["error"] != cause.Error() || attrs["path"] != "member/wal" {
			t.Errorf("%s: attributes %v", how, fe.Attrs)
		}
	}

	if fatal("failed to purge wal file") {
		t.Error("without OnFatal: the code after Fatal ran")
	}
	select {
	case err := <-e.Err():
		check("Err", err)
	case <-time.After(5 * time.Second):
		t.Fatal("without OnFatal: nothing on Err")
	}

	got := make(chan *FatalError, 1)
	e.OnFatal(func(fe *FatalError) { got <- fe })
	if fatal("failed to purge wal file") {
		t.Error("with OnFatal: the code after Fatal ran")
	}
	select {
	case fe := <-got:
		check("OnFatal", fe)
	default:
		t.Fatal("OnFatal's function was not called")
	}
	select {
	case err := <-e.Err():
		t.Errorf("with OnFatal, Err got %v too", err)
	default:
	}

	rec.mu.Lock()
	var logged int
	for _, r := range rec.records {
		if r.Message == "failed to purge wal file" && r.Level == slog.LevelError {
			logged++
		}
	}
	rec.mu.Unlock()
	if logged != 2 {
		t.Errorf("the fatal record was logged %d times at error, want 2", logged)
	}
	if err := e.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
