package sqllock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/sqllock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/faultproxy"
)

// TestInvalidOptions: every bad option value is an error matching
// driver.ErrInvalidOption that names the option, and New starts nothing.
func TestInvalidOptions(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://127.0.0.1:1/none") // never dialled
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		name string
		opt  sqllock.Option
	}{
		{"WithCleanupInterval", sqllock.WithCleanupInterval(0)},
		{"WithCleanupInterval", sqllock.WithCleanupInterval(-time.Second)},
		{"WithCleanupBatch", sqllock.WithCleanupBatch(0)},
		{"WithCleanupBatch", sqllock.WithCleanupBatch(-1)},
		{"WithCleanupBatch", sqllock.WithCleanupBatch(1_000_000)},
		{"WithRetention", sqllock.WithRetention(0)},
		{"WithRetention", sqllock.WithRetention(-time.Minute)},
		{"WithRequestTimeout", sqllock.WithRequestTimeout(0)},
		{"WithRequestTimeout", sqllock.WithRequestTimeout(-time.Second)},
	}
	for _, c := range cases {
		b, err := sqllock.New(db, sqllock.Postgres, sqllock.WithRetention(time.Hour), c.opt)
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), c.name) || b != nil {
			t.Errorf("%s: got %v, %v; want an error matching ErrInvalidOption naming the option", c.name, b, err)
		}
	}
	if _, err := sqllock.New(nil, sqllock.Postgres); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("nil db: %v", err)
	}
	if _, err := sqllock.New(db, nil); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("nil dialect: %v", err)
	}
	if _, err := sqllock.OpenDSN(context.Background(), "pgx", "postgres://127.0.0.1:1/none", sqllock.Postgres,
		sqllock.WithCleanupBatch(0)); !errors.Is(err, driver.ErrInvalidOption) {
		t.Errorf("Open with an invalid option: %v", err)
	}
}

// unreachable fails to open a backend on an address where nothing listens,
// with context.Background(): at once, naming the dial error.
func unreachable(t *testing.T, st store) {
	addr := freeAddr(t)
	start := time.Now()
	_, err := sqllock.OpenDSN(context.Background(), st.driver, st.dsnAt(addr), st.dialect)
	checkRefused(t, err, time.Since(start))
	if st.dialect == sqllock.Postgres {
		return
	}
	start = time.Now()
	_, err = distlock.Open(context.Background(), "mysql+table://root@"+addr+"/distlock")
	checkRefused(t, err, time.Since(start))
}

func checkRefused(t *testing.T, err error, took time.Duration) {
	t.Helper()
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("open of an address where nothing listens: %v; want the dial error", err)
	}
	if took > 2*time.Second {
		t.Fatalf("open of an address where nothing listens took %v", took)
	}
}

// freeAddr returns a loopback address where nothing listens.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// requestTimeout blackholes the link to the store: every call fails within
// the request timeout although the caller's context has no deadline.
func requestTimeout(t *testing.T, st store) {
	const timeout = 300 * time.Millisecond
	ctx := testContext(t, time.Minute)
	p := faultproxy.Start(t, st.s.Addr())
	b := st.openAt(t, p.Addr(), sqllock.WithRequestTimeout(timeout))
	t.Cleanup(func() { p.Restore(); _ = b.Close() })
	req := driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: time.Minute}
	if _, err := b.Acquire(ctx, req); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	calls := map[string]func(context.Context) error{
		"Acquire": func(ctx context.Context) error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: time.Minute})
			return err
		},
		"Renew":   func(ctx context.Context) error { return b.Renew(ctx, req.Key, req.Token, time.Minute) },
		"Release": func(ctx context.Context) error { return b.Release(ctx, req.Key, req.Token) },
		"Inspect": func(ctx context.Context) error { _, err := b.Inspect(ctx, req.Key); return err },
	}
	for name, call := range calls {
		start := time.Now()
		err := call(context.Background())
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) && (err == nil || !strings.Contains(err.Error(), "timeout")) {
			t.Errorf("%s through a blackholed link: %v; want the request timeout", name, err)
		}
		if took > timeout+2*time.Second {
			t.Errorf("%s through a blackholed link took %v, request timeout %v", name, took, timeout)
		}
	}
}

// closedBackend: every call after Close, or after the database handle the
// backend uses was closed, fails at once with an error matching
// driver.ErrClosed.
func closedBackend(t *testing.T, st store) {
	own := st.open(t)
	if err := own.Close(); err != nil {
		t.Fatal(err)
	}
	checkClosed(t, own)

	db, err := sql.Open(st.driver, st.dsn)
	if err != nil {
		t.Fatal(err)
	}
	users, err := sqllock.New(db, st.dialect)
	if err != nil {
		t.Fatal(err)
	}
	defer users.Close()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	checkClosed(t, users)
}

func checkClosed(t *testing.T, b *sqllock.Backend) {
	t.Helper()
	ctx, key, tok := context.Background(), uniqueKey(t), token()
	calls := map[string]func() error{
		"Acquire": func() error {
			_, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: tok, TTL: time.Minute})
			return err
		},
		"Renew":        func() error { return b.Renew(ctx, key, tok, time.Minute) },
		"Release":      func() error { return b.Release(ctx, key, tok) },
		"Inspect":      func() error { _, err := b.Inspect(ctx, key); return err },
		"List":         func() error { _, err := b.List(ctx, key); return err },
		"ListPage":     func() error { _, err := b.ListPage(ctx, key, "", 1); return err },
		"ForceRelease": func() error { _, err := b.ForceRelease(ctx, key, driver.ForceOptions{}); return err },
		"Cleanup":      func() error { _, err := b.Cleanup(ctx); return err },
		"Migrate":      func() error { return b.Migrate(ctx) },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		if !errors.Is(err, driver.ErrClosed) {
			t.Errorf("%s when closed: %v; want ErrClosed", name, err)
		}
		if took := time.Since(start); took > time.Second {
			t.Errorf("%s when closed took %v", name, took)
		}
	}
}

// forceRelease frees a held key whoever holds it, reporting the hold; the
// old holder's Renew and Release get ErrNotHeld and free nothing; another
// client gets the key at once with a higher fence. A free key is ErrNotHeld
// and stays as it was.
func forceRelease(t *testing.T, st store, admin *sqllock.Backend) {
	ctx := testContext(t, time.Minute)
	holder, other := st.open(t), st.client(t)
	t.Cleanup(func() { _ = holder.Close() })
	req := driver.AcquireRequest{Key: uniqueKey(t), Token: token(), TTL: time.Minute,
		Meta: driver.Meta{Owner: "svc-a", BusinessID: "order-7"}}
	g, err := holder.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	info, err := admin.ForceRelease(ctx, req.Key, driver.ForceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Held || info.Fence != g.Fence || info.Meta.Owner != "svc-a" || info.Meta.BusinessID != "order-7" ||
		info.TTL <= 0 || info.TTL > time.Minute || info.Key != req.Key {
		t.Fatalf("ForceRelease reported %+v; want the hold with fence %d", info, g.Fence)
	}
	l, err := other.TryLock(ctx, req.Key)
	if err != nil {
		t.Fatalf("the key is not free after ForceRelease: %v", err)
	}
	defer l.Release(ctx)
	if l.Fence() <= g.Fence {
		t.Fatalf("fence %d after ForceRelease is not above %d", l.Fence(), g.Fence)
	}
	if err := holder.Renew(ctx, req.Key, req.Token, time.Minute); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("old holder's Renew: %v; want ErrNotHeld", err)
	}
	if err := holder.Release(ctx, req.Key, req.Token); !errors.Is(err, driver.ErrNotHeld) {
		t.Fatalf("old holder's Release: %v; want ErrNotHeld", err)
	}
	if info, err := other.Inspect(ctx, req.Key); err != nil || !info.Held || info.Fence != l.Fence() {
		t.Fatalf("the new holder's key after the old holder's Release: %+v, %v", info, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	before, err := admin.Inspect(ctx, req.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{req.Key, uniqueKey(t)} { // released; never locked
		if _, err := admin.ForceRelease(ctx, key, driver.ForceOptions{}); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("ForceRelease of free %q: %v; want ErrNotHeld", key, err)
		}
	}
	if after, err := admin.Inspect(ctx, req.Key); err != nil || fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("ForceRelease of a free key changed it: %+v, %v; was %+v", after, err, before)
	}
}

// cleanupLoop locks and releases many distinct keys, and lets some leases
// expire: the periodic cleanup (short interval and retention) deletes every
// row they left, and keeps a held key's row.
func cleanupLoop(t *testing.T, st store) {
	const n = 40
	ctx := testContext(t, time.Minute)
	c := distlock.New(st.open(t, sqllock.WithCleanupInterval(20*time.Millisecond), sqllock.WithRetention(time.Millisecond)))
	t.Cleanup(func() { _ = c.Close() })
	keys := make([]string, n)
	for i := range keys {
		keys[i] = uniqueKey(t)
		lease := time.Minute
		if i%4 == 0 {
			// Never released: expires. Long enough that a grant on a busy
			// machine still arrives within it.
			lease = 500 * time.Millisecond
		}
		l, err := c.TryLock(ctx, keys[i], distlock.WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		if i%4 != 0 {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	held, err := c.TryLock(ctx, uniqueKey(t))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	var left int
	gone := waitUntil(func() bool {
		left = 0
		for _, k := range keys {
			info, err := c.Inspect(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			if info.Fence != 0 { // the row is still there
				left++
			}
		}
		return left == 0
	})
	if !gone {
		t.Fatalf("%d of %d rows left after the cleanup loop ran for 10s", left, n)
	}
	if info, err := c.Inspect(ctx, held.Key()); err != nil || !info.Held || info.Fence != held.Fence() {
		t.Fatalf("cleanup touched a held row: %+v, %v", info, err)
	}
}

// token returns a fresh 128-bit hex token.
func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
