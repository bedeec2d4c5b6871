package registry

import (
	"maps"
	"slices"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := New[int]("test")
	r.Add("b", 2)
	r.Add("a", 1)
	r.Decline("c", "no c")
	if got := r.Schemes(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Schemes() = %v", got)
	}
	if got := r.Declined(); !maps.Equal(got, map[string]string{"c": "no c"}) {
		t.Errorf("Declined() = %v", got)
	}
	for scheme, want := range map[string]struct {
		v      int
		reason string
		ok     bool
	}{"a": {1, "", true}, "c": {0, "no c", true}, "d": {0, "", false}} {
		v, reason, ok := r.Lookup(scheme)
		if v != want.v || reason != want.reason || ok != want.ok {
			t.Errorf("Lookup(%q) = %v, %q, %v", scheme, v, reason, ok)
		}
	}
}

func TestRegistryPanics(t *testing.T) {
	for name, f := range map[string]func(r *Registry[int]){
		"empty scheme":       func(r *Registry[int]) { r.Add("", 1) },
		"added twice":        func(r *Registry[int]) { r.Add("a", 2) },
		"added and declined": func(r *Registry[int]) { r.Decline("a", "why") },
		"declined twice":     func(r *Registry[int]) { r.Decline("c", "again") },
		"no reason":          func(r *Registry[int]) { r.Decline("d", "") },
	} {
		r := New[int]("test")
		r.Add("a", 1)
		r.Decline("c", "no c")
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f(r)
		}()
	}
}
