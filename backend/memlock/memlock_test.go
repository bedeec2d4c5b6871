package memlock_test

import (
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
		NewBackend: func(testing.TB) driver.Backend { return b },
		DeleteKey:  func(_ testing.TB, key string) { b.ForceDelete(key) },
	})
}
