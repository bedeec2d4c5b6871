package telemetry_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestScriptMemlock(t *testing.T) {
	mem := memlock.New()
	runScript(t, store{
		newBackend: func(*testing.T) distlock.Backend { return mem },
		steal:      func(_ *testing.T, l *distlock.Lock) { mem.ForceDelete(l.Key()) },
	})
}
