package distlock

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"

	"github.com/distlock/distlock/driver"
)

// OpenFunc builds a backend from a URL whose scheme it was registered for.
type OpenFunc func(ctx context.Context, u *url.URL) (driver.Backend, error)

var (
	registryMu sync.RWMutex
	registry   = make(map[string]OpenFunc)
)

// Register makes a backend available to Open under a URL scheme. Backends call
// it from init. It panics if scheme is empty, open is nil, or the scheme is
// already registered.
func Register(scheme string, open OpenFunc) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if scheme == "" || open == nil {
		panic("distlock: Register needs a scheme and an open function")
	}
	if _, dup := registry[scheme]; dup {
		panic("distlock: Register called twice for scheme " + scheme)
	}
	registry[scheme] = open
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	s := make([]string, 0, len(registry))
	for k := range registry {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}

// Open builds the backend named by rawURL's scheme and returns a client over
// it. The backend package must be imported, usually blank:
//
//	import _ "github.com/distlock/distlock/backend/redislock"
func Open(ctx context.Context, rawURL string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		return nil, fmt.Errorf("distlock: open %q: not a URL with a scheme, such as redis://127.0.0.1:6379 (registered schemes: %v)",
			driver.Redact(rawURL), Schemes())
	}
	registryMu.RLock()
	open := registry[u.Scheme]
	registryMu.RUnlock()
	if open == nil {
		return nil, fmt.Errorf("distlock: open: unknown scheme %q (forgotten import?); registered: %v", u.Scheme, Schemes())
	}
	b, err := open(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("distlock: open %s: %w", driver.RedactURL(u), err)
	}
	return New(b, opts...), nil
}
