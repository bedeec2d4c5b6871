package sqllock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/driver"
)

// TestMariaDBUpgradeFromSequence migrates a schema of the earlier version,
// whose fences came from the sequence distlock_fence: keys released back
// then have no row, yet their next fence must be above every fence the
// sequence handed out. Its token column, CHAR(32), is widened to take the
// longest token.
func TestMariaDBUpgradeFromSequence(t *testing.T) {
	st := mariadb(t)
	ctx := testContext(t, time.Minute)
	b := st.open(t)
	t.Cleanup(func() { _ = b.Close() })
	for _, q := range []string{
		"CREATE SEQUENCE distlock_fence",
		`CREATE TABLE distlock_leases (
			lock_key   VARBINARY(512) NOT NULL PRIMARY KEY,
			token      CHAR(32) NOT NULL,
			fence      BIGINT NOT NULL,
			expires_at DATETIME(6) NOT NULL,
			owner      TEXT NOT NULL,
			metadata   TEXT NOT NULL,
			KEY distlock_leases_expires_at (expires_at)
		) ENGINE = InnoDB`,
		"SELECT SETVAL(distlock_fence, 5000)", // 5000 fences granted, their rows since released
		"INSERT INTO distlock_leases VALUES ('kept', REPEAT('0', 32), 7, '1970-01-02', '', '{}')",
	} {
		if _, err := b.DB().ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for range 2 { // Migrate is idempotent
		if err := b.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A key whose row is gone starts above the sequence; a key with a row
	// goes on from its own last fence.
	for key, above := range map[string]uint64{"released-long-ago": 5000, "kept": 7} {
		g, err := b.Acquire(ctx, driver.AcquireRequest{Key: key, Token: "11111111111111111111111111111111", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if g.Fence <= above {
			t.Errorf("%s: fence %d after the upgrade, want above %d", key, g.Fence, above)
		}
	}
	long := strings.Repeat("t", distlock.MaxTokenLen)
	if _, err := b.Acquire(ctx, driver.AcquireRequest{Key: "long-token", Token: long, TTL: time.Minute}); err != nil {
		t.Fatalf("a token of %d bytes after the upgrade: %v", len(long), err)
	}
	if err := b.Release(ctx, "long-token", long); err != nil {
		t.Fatalf("release with a token of %d bytes after the upgrade: %v", len(long), err)
	}
}
