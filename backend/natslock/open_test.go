package natslock_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/natslock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

func TestParseURL(t *testing.T) {
	u, _ := url.Parse("nats://app:secret@127.0.0.1:4222,127.0.0.1:4223?bucket=jobs&connect_timeout=2s&request_timeout=3s")
	cfg, err := natslock.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.Servers, ",") != "nats://127.0.0.1:4222,nats://127.0.0.1:4223" || cfg.Bucket != "jobs" ||
		cfg.User != "app" || cfg.Password != "secret" || cfg.ConnectTimeout != 2*time.Second || len(cfg.Options) != 1 {
		t.Fatalf("ParseURL = %+v", cfg)
	}
	u, _ = url.Parse("nats://tok@127.0.0.1:4222")
	if cfg, err := natslock.ParseURL(u); err != nil || cfg.Token != "tok" || cfg.Bucket != natslock.DefaultBucket {
		t.Fatalf("ParseURL of a token URL = %+v, %v", cfg, err)
	}
	for _, bad := range []string{"redis://127.0.0.1:1", "nats://", "nats://127.0.0.1:1/locks", "nats://127.0.0.1:1,",
		"nats://127.0.0.1:1?bucket=a.b", "nats://127.0.0.1:1?bucket=", "nats://127.0.0.1:1?colour=red",
		"nats://127.0.0.1:1?connect_timeout=0s", "nats://127.0.0.1:1?request_timeout=soon", "nats://127.0.0.1:1?bucket=a&bucket=b"} {
		if _, err := natslock.Open(context.Background(), bad); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("Open(%q): %v, want ErrInvalidOption", bad, err)
		}
	}
}

func TestNewRefusesBadInput(t *testing.T) {
	if _, err := natslock.New(nil, "locks"); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("New(nil): %v, want ErrInvalidOption", err)
	}
	nc := newStore(t).conn(t)
	for name, try := range map[string]func() error{
		"bucket a.b":   func() error { _, err := natslock.New(nc, "a.b"); return err },
		"empty bucket": func() error { _, err := natslock.New(nc, ""); return err },
		"request 0":    func() error { _, err := natslock.New(nc, "locks", natslock.WithRequestTimeout(0)); return err },
		"request -1s": func() error {
			_, err := natslock.New(nc, "locks", natslock.WithRequestTimeout(-time.Second))
			return err
		},
		"marker TTL 1ms": func() error {
			return natslock.CreateBucket(t.Context(), nil, "x", natslock.BucketOptions{MarkerTTL: time.Millisecond})
		},
	} {
		if err := try(); !errors.Is(err, driver.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}

// TestOpenUnreachable: a server that refuses fails Open at once, naming
// the refused connection.
func TestOpenUnreachable(t *testing.T) {
	addr := fmt.Sprintf("%s:%d", testserver.Host, testserver.FreePort(t))
	start := time.Now()
	_, err := distlock.Open(context.Background(), "nats://"+addr+"?bucket=locks")
	if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > 5*time.Second {
		t.Fatalf("Open of a refusing server: %v after %v, want the refused connection at once", err, time.Since(start))
	}
}

// TestClosed: every call after Close fails with ErrClosed, and Close of a
// backend over the caller's connection leaves the connection open.
func TestClosed(t *testing.T) {
	st := newStore(t)
	nc := st.conn(t)
	b, err := natslock.New(nc, st.bucket)
	if err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	ctx := testContext(t, 10*time.Second)
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "k", Token: token(), TTL: time.Second}); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Acquire after Close: %v", err)
	}
	if _, _, err := b.Watch(ctx, "k"); !errors.Is(err, driver.ErrClosed) {
		t.Errorf("Watch after Close: %v", err)
	}
	if nc.IsClosed() {
		t.Error("Close closed the caller's connection")
	}
}
