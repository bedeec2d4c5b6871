package telemetry_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScriptMemlock(t *testing.T) {
	mem := memlock.New()
	runScript(t, store{
		newBackend: func(*testing.T) distlock.Backend { return mem },
		steal:      func(_ *testing.T, _ *distlock.Client, l *distlock.Lock) { mem.ForceDelete(l.Key()) },
	})
}

// TestScriptPostgres runs the sequence on a real PostgreSQL server through
// pglock. The loss is a release by token on the holder's own backend, behind
// its client's back: the advisory lock is gone from the server and the
// client's next renewal is refused.
func TestScriptPostgres(t *testing.T) {
	s := testserver.Postgres(t)
	runScript(t, store{
		newBackend: func(t *testing.T) distlock.Backend {
			b, err := pglock.Open(context.Background(), testserver.PostgresDSN(s)+"&pool_max_conns=4")
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		steal: func(t *testing.T, c *distlock.Client, l *distlock.Lock) {
			if err := c.Backend().Release(context.Background(), l.Key(), l.Token()); err != nil {
				t.Fatalf("release %q behind its holder's back: %v", l.Key(), err)
			}
		},
	})
}
