package policy_test

import (
	"context"
	"testing"

	"github.com/distlock/distlock/backend/pglock"
	"github.com/distlock/distlock/backend/redislock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/faultproxy"
	"github.com/distlock/distlock/internal/testserver"
	"github.com/distlock/distlock/policy"
)

// TestDegradationRedis slows a real redis-server with a fault proxy between
// redislock and the server.
func TestDegradationRedis(t *testing.T) {
	s := testserver.Redis(t)
	proxy := faultproxy.Start(t, s.Addr())
	runDegradation(t, slowStore{
		newBackend: func(t *testing.T) driver.Backend {
			b, err := redislock.Open(context.Background(), "redis://"+proxy.Addr())
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		slow:    func(*policy.Policy) { proxy.SetLatency(enterP99) }, // a round trip takes twice this
		restore: proxy.Restore,
	})
}

// TestDegradationPostgres slows a real PostgreSQL server with a fault proxy
// between pglock and the server.
func TestDegradationPostgres(t *testing.T) {
	s := testserver.Postgres(t)
	proxy := faultproxy.Start(t, s.Addr())
	runDegradation(t, slowStore{
		newBackend: func(t *testing.T) driver.Backend {
			b, err := pglock.Open(context.Background(), "postgres://postgres@"+proxy.Addr()+"/postgres?sslmode=disable&pool_max_conns=4")
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		slow:    func(*policy.Policy) { proxy.SetLatency(enterP99) }, // a round trip takes twice this
		restore: proxy.Restore,
	})
}
