package pglock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

// olderMigrateSQL is what Migrate created before databases recorded their
// key-id scheme, when every key mapped to its FNV-1a id.
const olderMigrateSQL = `
CREATE SEQUENCE IF NOT EXISTS distlock_pg_fence;
CREATE UNLOGGED TABLE IF NOT EXISTS distlock_pg_locks (
	lock_key   text PRIMARY KEY,
	lock_id    bigint NOT NULL,
	token      text NOT NULL,
	fence      bigint NOT NULL,
	pid        integer NOT NULL,
	expires_at timestamptz NOT NULL,
	meta       jsonb NOT NULL
);`

// database creates a database of its own on s and returns its DSN.
func database(t *testing.T, s *testserver.Server, admin *pgxpool.Pool) string {
	t.Helper()
	name := fmt.Sprintf("keyids_%d", seq.Add(1))
	if _, err := admin.Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(testserver.PostgresDSN(s), "/postgres?", "/"+name+"?", 1)
}

// connect returns one connection to dsn, closed when the test ends: a
// client of its own, whose session locks stay on it.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// openAt returns a backend on dsn with opts, closed when the test ends.
func openAt(t *testing.T, dsn string, opts ...pglock.Option) *pglock.Backend {
	t.Helper()
	b, err := pglock.Open(context.Background(), dsn, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// recorded returns the scheme the database of c records.
func recorded(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	var v string
	if err := c.QueryRow(context.Background(), "SELECT value FROM distlock_pg_settings WHERE name = 'key_ids'").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// tryRaw takes id's session advisory lock on c, as a client computing ids
// itself would, and reports whether it got it.
func tryRaw(t *testing.T, c *pgx.Conn, id int64) bool {
	t.Helper()
	var ok bool
	if err := c.QueryRow(context.Background(), "SELECT pg_try_advisory_lock($1)", id).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func unlockRaw(t *testing.T, c *pgx.Conn, id int64) {
	t.Helper()
	var ok bool
	if err := c.QueryRow(context.Background(), "SELECT pg_advisory_unlock($1)", id).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_advisory_unlock(%d) = %v, %v", id, ok, err)
	}
}

// advisoryLocks counts the advisory locks held in c's database.
func advisoryLocks(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeyIDs checks how a database's key-id scheme is chosen, recorded and
// enforced, each case on a database of its own.
func TestKeyIDs(t *testing.T) {
	s := testserver.Postgres(t)
	admin := newPool(t, s, 2)

	t.Run("NewDatabaseGetsSHA256", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		dsn := database(t, s, admin)
		raw := connect(t, dsn)
		b := openAt(t, dsn)
		if got := b.KeyIDs(); got != "" {
			t.Fatalf("KeyIDs before the first call = %q, want \"\"", got)
		}
		c := distlock.New(b)
		key := uniqueKey(t)
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.KeyIDs(); got != pglock.KeyIDsSHA256 {
			t.Fatalf("KeyIDs = %q, want %q", got, pglock.KeyIDsSHA256)
		}
		if got := recorded(t, raw); got != "sha256" {
			t.Fatalf("the database records key_ids %q, want sha256", got)
		}
		if b.ID(key) != pglock.KeyID(key) {
			t.Fatalf("ID = %#x, want KeyID %#x", b.ID(key), pglock.KeyID(key))
		}
		if tryRaw(t, raw, pglock.KeyID(key)) {
			t.Fatal("pg_try_advisory_lock(KeyID) got a key the backend holds")
		}
		_ = l.Release(ctx)
		// A second backend finds the row and adopts it.
		b2 := openAt(t, dsn)
		if err := b2.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if got := b2.KeyIDs(); got != pglock.KeyIDsSHA256 {
			t.Fatalf("a second backend's KeyIDs = %q, want %q", got, pglock.KeyIDsSHA256)
		}
	})

	t.Run("OlderDatabaseKeepsFNV1a", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		dsn := database(t, s, admin)
		raw := connect(t, dsn)
		if _, err := raw.Exec(ctx, olderMigrateSQL); err != nil {
			t.Fatal(err)
		}
		b := openAt(t, dsn)
		c := distlock.New(b)
		key := uniqueKey(t)
		old := pglock.LegacyKeyID(key) // what a client of an older version locks
		if !tryRaw(t, raw, old) {
			t.Fatal("pg_try_advisory_lock(LegacyKeyID) on a free key failed")
		}
		if _, err := c.TryLock(ctx, key); !errors.Is(err, distlock.ErrNotAcquired) {
			t.Fatalf("TryLock of a key an older client holds: %v, want ErrNotAcquired", err)
		}
		if got := b.KeyIDs(); got != pglock.KeyIDsFNV1a {
			t.Fatalf("KeyIDs = %q, want %q", got, pglock.KeyIDsFNV1a)
		}
		if got := recorded(t, raw); got != "fnv1a" {
			t.Fatalf("the database records key_ids %q, want fnv1a", got)
		}
		info, err := c.Inspect(ctx, key)
		if err != nil || !info.Held {
			t.Fatalf("Inspect of a key an older client holds = %+v, %v; want held", info, err)
		}
		unlockRaw(t, raw, old)
		l, err := c.TryLock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if tryRaw(t, raw, old) {
			t.Fatal("an older client's pg_try_advisory_lock got a key the backend holds")
		}
		_ = l.Release(ctx)

		// The backend's other ways to lock follow the scheme too, each as a
		// backend's first call.
		rw := openAt(t, dsn)
		name := uniqueKey(t)
		if _, err := rw.AcquireRW(ctx, driver.AcquireRequest{Key: name, Token: "rw", TTL: time.Minute}, driver.Exclusive); err != nil {
			t.Fatal(err)
		}
		if tryRaw(t, raw, pglock.LegacyKeyID(name)) {
			t.Fatal("an older client's pg_try_advisory_lock got a name a writer holds")
		}
		if err := rw.ReleaseRW(ctx, name, "rw"); err != nil {
			t.Fatal(err)
		}
		xb := openAt(t, dsn)
		xkey := uniqueKey(t)
		err = pgx.BeginFunc(ctx, connect(t, dsn), func(tx pgx.Tx) error {
			if err := xb.XactLock(ctx, tx, xkey); err != nil {
				return err
			}
			if tryRaw(t, raw, pglock.LegacyKeyID(xkey)) {
				return errors.New("an older client's pg_try_advisory_lock got a key a transaction holds")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ExplicitSHA256OnOlderDatabase", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		dsn := database(t, s, admin)
		raw := connect(t, dsn)
		if _, err := raw.Exec(ctx, olderMigrateSQL); err != nil {
			t.Fatal(err)
		}
		b := openAt(t, dsn+"&key_ids=sha256")
		if err := b.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if got := recorded(t, raw); got != "sha256" || b.KeyIDs() != pglock.KeyIDsSHA256 {
			t.Fatalf("recorded %q, KeyIDs %q; want sha256 for both", got, b.KeyIDs())
		}
	})

	t.Run("MismatchLocksNothing", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		dsn := database(t, s, admin)
		raw := connect(t, dsn)
		if err := openAt(t, dsn).Migrate(ctx); err != nil { // records sha256
			t.Fatal(err)
		}
		for _, b := range []*pglock.Backend{openAt(t, dsn, pglock.WithKeyIDs(pglock.KeyIDsFNV1a)), openAt(t, dsn+"&key_ids=fnv1a")} {
			c := distlock.New(b)
			_, err := c.TryLock(ctx, uniqueKey(t))
			if !errors.Is(err, pglock.ErrKeyIDsMismatch) {
				t.Fatalf("TryLock with key_ids fnv1a on a sha256 database: %v, want ErrKeyIDsMismatch", err)
			}
			if msg := err.Error(); !strings.Contains(msg, `"sha256"`) || !strings.Contains(msg, `"fnv1a"`) {
				t.Errorf("the error names not both schemes: %v", err)
			}
			if err := b.Migrate(ctx); !errors.Is(err, pglock.ErrKeyIDsMismatch) {
				t.Fatalf("Migrate: %v, want ErrKeyIDsMismatch", err)
			}
			if b.KeyIDs() != "" {
				t.Fatalf("KeyIDs after a mismatch = %q, want \"\"", b.KeyIDs())
			}
		}
		if n := advisoryLocks(t, raw); n != 0 {
			t.Fatalf("%d advisory locks held after the refused attempts, want 0", n)
		}
		if got := recorded(t, raw); got != "sha256" {
			t.Fatalf("the database records key_ids %q after the refused attempts, want sha256", got)
		}
	})

	t.Run("ChangedUnderARunningBackend", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		dsn := database(t, s, admin)
		raw := connect(t, dsn)
		b := openAt(t, dsn)
		if err := b.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(ctx, "UPDATE distlock_pg_settings SET value = 'fnv1a' WHERE name = 'key_ids'"); err != nil {
			t.Fatal(err)
		}
		if err := b.Migrate(ctx); !errors.Is(err, pglock.ErrKeyIDsMismatch) {
			t.Fatalf("Migrate after the database's scheme changed: %v, want ErrKeyIDsMismatch", err)
		}
		if b.KeyIDs() != pglock.KeyIDsSHA256 {
			t.Fatalf("KeyIDs = %q, want the adopted %q", b.KeyIDs(), pglock.KeyIDsSHA256)
		}
	})

	t.Run("UnknownRecordedScheme", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		dsn := database(t, s, admin)
		raw := connect(t, dsn)
		if err := openAt(t, dsn).Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(ctx, "UPDATE distlock_pg_settings SET value = 'SHA-256' WHERE name = 'key_ids'"); err != nil {
			t.Fatal(err)
		}
		b := openAt(t, dsn)
		if err := b.Migrate(ctx); err == nil || !strings.Contains(err.Error(), `"SHA-256"`) {
			t.Fatalf("Migrate with key_ids 'SHA-256' recorded: %v, want an error naming it", err)
		}
		if b.KeyIDs() != "" {
			t.Fatalf("KeyIDs = %q, want \"\"", b.KeyIDs())
		}
	})

	t.Run("InvalidOption", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		_, err := pglock.Open(ctx, testserver.PostgresDSN(s)+"&key_ids=bogus")
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), "key_ids") {
			t.Fatalf("Open with key_ids=bogus: %v, want ErrInvalidOption naming key_ids", err)
		}
		_, err = pglock.New(admin, pglock.WithKeyIDs("bogus"))
		if !errors.Is(err, driver.ErrInvalidOption) || !strings.Contains(err.Error(), "WithKeyIDs") {
			t.Fatalf("WithKeyIDs(bogus): %v, want ErrInvalidOption naming WithKeyIDs", err)
		}
		_, err = distlock.Open(ctx, testserver.PostgresDSN(s)+"&key_ids=")
		if !errors.Is(err, driver.ErrInvalidOption) {
			t.Fatalf("distlock.Open with an empty key_ids: %v, want ErrInvalidOption", err)
		}
	})

	t.Run("NoIDBeforeTheScheme", func(t *testing.T) {
		ctx := testContext(t, time.Minute)
		b := openAt(t, database(t, s, admin))
		// Releases of holds the backend never took compute no id.
		if err := b.ReleaseRW(ctx, "name", "token"); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("ReleaseRW of nothing: %v, want ErrNotHeld", err)
		}
		if err := b.ReleasePermit(ctx, "name", "token"); !errors.Is(err, driver.ErrNotHeld) {
			t.Fatalf("ReleasePermit of nothing: %v, want ErrNotHeld", err)
		}
		defer func() {
			if recover() == nil {
				t.Fatal("ID before the backend knew the scheme did not panic")
			}
		}()
		_ = b.ID("key")
	})
}

// BenchmarkKeyID compares the cost of the two schemes' ids of a typical
// key of the lock service.
func BenchmarkKeyID(b *testing.B) {
	const key = "tenants/alpha/orders/2026-12-01/000042"
	var sink int64
	b.Run("sha256", func(b *testing.B) {
		for b.Loop() {
			sink += pglock.KeyID(key)
		}
	})
	b.Run("fnv1a", func(b *testing.B) {
		for b.Loop() {
			sink += pglock.LegacyKeyID(key)
		}
	})
	_ = sink
}
