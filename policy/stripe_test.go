package policy_test

import (
	"fmt"
	"testing"

	"github.com/distlock/distlock/policy"
)

func TestStripe(t *testing.T) {
	// Stable across processes and releases: these values (64-bit FNV-1a of
	// the id, modulo n) must never change.
	for _, c := range []struct {
		id   string
		n    int
		want string
	}{
		{"", 8, "seats#5"},
		{"row-1", 8, "seats#1"},
		{"row-2", 8, "seats#0"},
		{"row-1", 1, "seats#0"},
	} {
		if got := policy.Stripe("seats", c.id, c.n); got != c.want {
			t.Errorf("Stripe(seats, %q, %d) = %q, want %q", c.id, c.n, got, c.want)
		}
	}
	const n = 16
	counts := map[string]int{}
	for i := range 16000 {
		k := policy.Stripe("seats", fmt.Sprint("id-", i), n)
		if policy.Stripe("seats", fmt.Sprint("id-", i), n) != k {
			t.Fatalf("Stripe is not deterministic for id-%d", i)
		}
		counts[k]++
	}
	all := policy.Stripes("seats", n)
	if len(all) != n || all[0] != "seats#0" || all[n-1] != "seats#15" || len(counts) != n {
		t.Fatalf("Stripes = %v; ids spread over %d stripes, want %d", all, len(counts), n)
	}
	for _, k := range all {
		if c := counts[k]; c < 800 || c > 1200 {
			t.Errorf("stripe %s got %d of 16000 ids, want about 1000", k, c)
		}
	}
}

func TestStripePanics(t *testing.T) {
	for _, f := range []func(){func() { policy.Stripe("k", "id", 0) }, func() { policy.Stripes("k", -1) }} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("n < 1 did not panic")
				}
			}()
			f()
		}()
	}
}
