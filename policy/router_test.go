package policy_test

import (
	"context"
	"strings"
	"testing"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/backend/memlock"
	"github.com/distlock/distlock/policy"
)

func TestRouter(t *testing.T) {
	cfg, err := policy.LoadFile("testdata/groups.yaml")
	if err != nil {
		t.Fatal(err)
	}
	newClient := func(store *memlock.Backend) *distlock.Client {
		p, err := policy.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		c := distlock.New(store, distlock.WithPolicy(p), distlock.WithObserver(p))
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	payStore, otherStore := memlock.New(), memlock.New()
	p, err := policy.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := policy.NewRouter(p, newClient(otherStore), map[string]*distlock.Client{"payments": newClient(payStore)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for key, want := range map[string]*memlock.Backend{
		uniqueKey(t, "payment/"): payStore,
		uniqueKey(t, "refund/"):  payStore,
		uniqueKey(t, "report/"):  otherStore,
		uniqueKey(t, "x/"):       otherStore,
	} {
		l, err := r.Client(key).TryLock(ctx, key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if info, err := want.Inspect(ctx, key); err != nil || !info.Held {
			t.Errorf("%s is not held in the store of its group (%v)", key, err)
		}
		_ = l.Release(ctx)
	}

	if _, err := policy.NewRouter(p, newClient(otherStore), map[string]*distlock.Client{"paymens": newClient(payStore)}); err == nil || !strings.Contains(err.Error(), `no group "paymens"`) {
		t.Errorf("unknown group: err = %v", err)
	}
	if _, err := policy.NewRouter(p, nil, nil); err == nil {
		t.Error("nil fallback accepted")
	}
}
