package telemetry_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScriptMemlock(t *testing.T) {
	mem := memlock.New()
	runScript(t, store{
		newBackend: func(*testing.T) driver.Backend { return mem.Connect() },
		steal: func(_ *testing.T, _ *distlock.Client, l *distlock.Lock) {
			_, _ = mem.ForceRelease(context.Background(), l.Key(), driver.ForceOptions{})
		},
	})
}

// stealByToken releases l by its token on the holder's own backend, behind
// its client's back: the lock is gone from the store and the client's next
// renewal is refused.
func stealByToken(t *testing.T, c *distlock.Client, l *distlock.Lock) {
	if err := c.Backend().Release(context.Background(), l.Key(), l.Token()); err != nil {
		t.Fatalf("release %q behind its holder's back: %v", l.Key(), err)
	}
}

// TestScriptRedis runs the sequence on a real redis-server through redislock.
func TestScriptRedis(t *testing.T) {
	s := testserver.Redis(t)
	runScript(t, store{
		newBackend: func(t *testing.T) driver.Backend {
			b, err := redislock.Open(context.Background(), "redis://"+s.Addr())
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		steal: stealByToken,
	})
}

// TestScriptPostgres runs the sequence on a real PostgreSQL server through
// pglock, whose Lock waits natively.
func TestScriptPostgres(t *testing.T) {
	s := testserver.Postgres(t)
	runScript(t, store{
		newBackend: func(t *testing.T) driver.Backend {
			b, err := pglock.Open(context.Background(), testserver.PostgresDSN(s)+"&pool_max_conns=4")
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		steal: stealByToken,
	})
}
