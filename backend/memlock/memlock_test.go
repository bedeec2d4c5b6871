package memlock_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/locktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	b := memlock.New()
	locktest.Run(t, locktest.Harness{
		NewBackend: func(testing.TB) driver.Backend { return b.Connect() },
		DeleteKey: func(t testing.TB, key string) {
			if _, err := b.ForceRelease(context.Background(), key, driver.ForceOptions{}); err != nil {
				t.Fatal(err)
			}
		},
	})
}
