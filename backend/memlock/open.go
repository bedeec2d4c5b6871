package memlock

import (
	"context"
	"net/url"
	"sync"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/internal/urlq"
)

func init() {
	distlock.Register("mem", urlq.Opener(func(_ context.Context, u *url.URL) (*Backend, error) { return openURL(u) }))
}

var (
	namedMu sync.Mutex
	named   = make(map[string]*Backend)
)

// pkg begins the errors of the backend's URL grammar.
const pkg = "memlock"

// Config is what a mem:// URL says.
type Config struct {
	// Name is the process-wide store's name, HOST and PATH of the URL;
	// empty for a fresh store.
	Name string
}

// ParseURL reads a mem:// URL: mem:// or mem://NAME, with no credentials
// and no parameter; anything else is an error matching
// driver.ErrInvalidOption.
func ParseURL(u *url.URL) (Config, error) {
	switch {
	case u.Scheme != "mem":
		return Config{}, urlq.Invalidf(pkg, "scheme", "%q, want mem", u.Scheme)
	case u.User != nil:
		return Config{}, urlq.Invalidf(pkg, "user", "mem:// takes no credentials")
	}
	if err := urlq.New(pkg, u.Query()).Done(); err != nil {
		return Config{}, err
	}
	return Config{Name: u.Host + u.Path}, nil
}

// Open returns a handle on a fresh store for "mem://", or on the
// process-wide store named NAME for "mem://NAME", made on first use. The
// context is unused: nothing is dialled.
func Open(_ context.Context, rawURL string) (*Backend, error) {
	u, err := urlq.Parse(pkg, rawURL)
	if err != nil {
		return nil, err
	}
	return openURL(u)
}

// openURL is Open after url.Parse, and distlock.Open's way in.
func openURL(u *url.URL) (*Backend, error) {
	cfg, err := ParseURL(u)
	if err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		return New(), nil
	}
	namedMu.Lock()
	defer namedMu.Unlock()
	b, ok := named[cfg.Name]
	if !ok {
		b = New()
		named[cfg.Name] = b
	}
	return b.Connect(), nil
}
