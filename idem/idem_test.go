package idem_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/idem"
	"github.com/distlock/distlock/idem/idemtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newKeeper(t *testing.T, store idem.Store, opts ...idem.Option) *idem.Keeper {
	t.Helper()
	c := distlock.New(memlock.New())
	t.Cleanup(func() { c.Close() })
	k, err := idem.New(c, store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestMemory(t *testing.T) {
	s := idem.NewMemoryStore()
	idemtest.Run(t, newKeeper(t, s), s)
}
