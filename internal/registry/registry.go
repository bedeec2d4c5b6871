// Package registry is a table of URL schemes, each with a value or with
// the declared reason it has none: the shape shared by the store tools'
// registries (package storetool/doctor and storetool/floor), in which
// every scheme says what it has, so that nothing is missing by accident.
package registry

import (
	"maps"
	"slices"
	"sync"
)

// Registry maps URL schemes to values of type T or to the reason they have
// none; make one with New. Its methods panic on a misuse, as registration
// from init should: a duplicate or empty scheme, a scheme given both a
// value and a reason, or an empty reason.
type Registry[T any] struct {
	name     string // the owner's package name, for panics
	mu       sync.RWMutex
	values   map[string]T
	declined map[string]string
}

// New returns an empty registry whose panics name the package that owns it.
func New[T any](name string) *Registry[T] {
	return &Registry[T]{name: name, values: map[string]T{}, declined: map[string]string{}}
}

// Add registers v for scheme.
func (r *Registry[T]) Add(scheme string, v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.claim(scheme)
	r.values[scheme] = v
}

// Decline records that scheme has no value, and why.
func (r *Registry[T]) Decline(scheme, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reason == "" {
		panic(r.name + ": a scheme without one needs the reason (" + scheme + ")")
	}
	r.claim(scheme)
	r.declined[scheme] = reason
}

// claim panics unless scheme is new and non-empty. r.mu is held.
func (r *Registry[T]) claim(scheme string) {
	if scheme == "" {
		panic(r.name + ": registration without a scheme")
	}
	_, v := r.values[scheme]
	_, d := r.declined[scheme]
	if v || d {
		panic(r.name + ": scheme " + scheme + " registered twice")
	}
}

// Lookup returns scheme's value, or the reason it has none. ok is false for
// a scheme never registered.
func (r *Registry[T]) Lookup(scheme string) (v T, reason string, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if v, ok := r.values[scheme]; ok {
		return v, "", true
	}
	reason, ok = r.declined[scheme]
	return v, reason, ok
}

// Schemes returns the schemes that have a value, sorted.
func (r *Registry[T]) Schemes() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.values))
}

// Declined returns a copy of the schemes declared to have no value, with
// their reasons.
func (r *Registry[T]) Declined() map[string]string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.declined)
}
