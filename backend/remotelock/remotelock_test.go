package remotelock_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/remotelock"
	"github.com/distlock/distlock/driver"
)

// The conformance suite runs this backend against the real service, in
// cmd/distlock/internal/server (remote_test.go); these tests need no
// service.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestNewRefusesBadInput(t *testing.T) {
	const secret = "s3cret-token-never-in-errors"
	base := "http://" + deadAddr(t)
	urls := map[string]string{
		"no scheme":   "127.0.0.1:7420",
		"ftp":         "ftp://127.0.0.1:7420",
		"no host":     "http:///x",
		"credentials": "http://user:" + secret + "@127.0.0.1:7420",
		"query":       base + "?token=" + secret,
		"fragment":    base + "#x",
		"not a URL":   "http://[::1",
	}
	for name, u := range urls {
		if _, err := remotelock.New(nil, u); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("base URL %s: got %v, want ErrInvalidOption", name, err)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("base URL %s: the error shows the secret: %v", name, err)
		}
	}
	opts := map[string]remotelock.Option{
		"nil option":               nil,
		"empty token":              remotelock.WithToken(""),
		"token with a space":       remotelock.WithToken(secret + " tenant client"),
		"token with a newline":     remotelock.WithToken(secret + "\n"),
		"zero request timeout":     remotelock.WithRequestTimeout(0),
		"negative request timeout": remotelock.WithRequestTimeout(-time.Second),
		"zero max wait":            remotelock.WithMaxWait(0),
	}
	for name, o := range opts {
		if _, err := remotelock.New(nil, base, o); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		} else if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the token: %v", name, err)
		}
	}
	b, err := remotelock.New(nil, base+"/prefix/", remotelock.WithToken(secret), remotelock.WithRequestTimeout(time.Second),
		remotelock.WithMaxWait(time.Second), remotelock.WithGRPC(), remotelock.WithLossWatch())
	if err != nil {
		t.Fatalf("valid options: %v", err)
	}
	if b.Name() != "distlock" {
		t.Errorf("Name = %q, want distlock", b.Name())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusesBadURLs: every bad URL is refused with ErrInvalidOption
// before anything is dialled, and a token never shows in an error.
func TestOpenRefusesBadURLs(t *testing.T) {
	const secret = "s3cret-token-never-in-errors"
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	twoLines := filepath.Join(dir, "two-lines")
	notPEM := filepath.Join(dir, "ca.pem")
	for path, content := range map[string]string{empty: " \n", twoLines: secret + "\n" + secret + "\n", notPEM: "not a certificate"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	addr := deadAddr(t)
	bad := map[string]string{
		"unknown parameter":      "distlock://" + addr + "?tokens=x",
		"parameter twice":        "distlock://" + addr + "?request_timeout=1s&request_timeout=2s",
		"bad duration":           "distlock://" + addr + "?request_timeout=soon",
		"zero request timeout":   "distlock://" + addr + "?request_timeout=0s",
		"negative max wait":      "distlock://" + addr + "?max_wait=-1s",
		"bad protocol":           "distlock://" + addr + "?protocol=soap",
		"bad h2c":                "distlock://" + addr + "?h2c=maybe",
		"bad watch_loss":         "distlock://" + addr + "?watch_loss=often",
		"grpc over HTTP/1.1":     "distlock://" + addr + "?protocol=grpc&h2c=false",
		"ca_file without TLS":    "distlock://" + addr + "?ca_file=" + notPEM,
		"ca_file not PEM":        "distlocks://" + addr + "?ca_file=" + notPEM,
		"empty token_file":       "distlock://" + addr + "?token_file=" + empty,
		"token_file of 2 lines":  "distlock://" + addr + "?token_file=" + twoLines,
		"empty token_file value": "distlock://" + addr + "?token_file=",
		"credentials":            "distlock://tenant:" + secret + "@" + addr,
		"no host":                "distlock:///x",
	}
	for name, u := range bad {
		_, err := distlock.Open(context.Background(), u)
		if !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: the error shows the secret: %v", name, err)
		}
	}
	if _, err := distlock.Open(context.Background(), "distlock://"+addr+"?token_file="+filepath.Join(dir, "missing")); err == nil ||
		!errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing token_file: got %v, want an error matching os.ErrNotExist", err)
	}
}

// TestOpenDeadService: Open fails at once, naming the address, when
// nothing listens there, and the URL once; so does a bad URL.
func TestOpenDeadService(t *testing.T) {
	addr := deadAddr(t)
	for _, scheme := range []string{"distlock", "distlocks"} {
		start := time.Now()
		raw := scheme + "://" + addr + "?request_timeout=2s"
		_, err := distlock.Open(context.Background(), raw)
		if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: got %v, want a refused connection naming %s", scheme, err, addr)
		}
		if err != nil && strings.Count(err.Error(), raw) != 1 {
			t.Errorf("%s: %v names %s other than once", scheme, err, raw)
		}
		bad := scheme + "://" + addr + "?request_timeout=soon"
		if _, err := distlock.Open(context.Background(), bad); !errors.Is(err, driver.ErrInvalidOption) || strings.Count(err.Error(), bad) != 1 {
			t.Errorf("%s: got %v, want ErrInvalidOption naming %s once", scheme, err, bad)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s: a refused connection took %v", scheme, took)
		}
	}
}

// TestClosed: after Close every call fails with ErrClosed, at once.
func TestClosed(t *testing.T) {
	b, err := remotelock.New(nil, "http://"+deadAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	req := driver.AcquireRequest{Key: "k", Token: "0123456789abcdef0123456789abcdef", TTL: time.Second}
	calls := map[string]error{
		"acquire":      func() error { _, err := b.Acquire(ctx, req); return err }(),
		"acquire wait": func() error { _, err := b.AcquireWait(ctx, req); return err }(),
		"renew":        b.Renew(ctx, "k", req.Token, time.Second),
		"release":      b.Release(ctx, "k", req.Token),
		"inspect":      func() error { _, err := b.Inspect(ctx, "k"); return err }(),
		"list":         func() error { _, err := b.List(ctx, "k"); return err }(),
		"force":        func() error { _, err := b.ForceRelease(ctx, "k", driver.ForceOptions{}); return err }(),
	}
	for op, err := range calls {
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", op, err)
		}
	}
}

// TestUnknownToken: a Renew or Release of a token this backend never
// acquired is ErrNotHeld without a call (the service here is unreachable,
// which a call would report instead).
func TestUnknownToken(t *testing.T) {
	b, err := remotelock.New(nil, "http://"+deadAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	const tok = "0123456789abcdef0123456789abcdef"
	if err := b.Renew(ctx, "k", tok, time.Second); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("renew of an unknown token: got %v, want ErrNotHeld", err)
	}
	if err := b.Release(ctx, "k", tok); !errors.Is(err, driver.ErrNotHeld) {
		t.Errorf("release of an unknown token: got %v, want ErrNotHeld", err)
	}
}
