package idem

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/registry"
)

// OpenFunc opens the Store of a store URL whose scheme it was registered
// for, ready for use (its table created where it needs one), and returns
// the function that closes what it opened.
type OpenFunc func(ctx context.Context, u *url.URL) (_ Store, closeStore func(), _ error)

// openers holds the registered OpenFuncs by URL scheme.
var openers = registry.New[OpenFunc]("idem")

// RegisterURL makes f open the Stores of URLs of scheme. The store packages
// (redisstore, pgstore, mysqlstore) call it from init, for the URLs their
// stores' lock backends take. It panics if f is nil or scheme is taken.
func RegisterURL(scheme string, f OpenFunc) {
	if f == nil {
		panic("idem: RegisterURL needs a function")
	}
	openers.Add(scheme, f)
}

// URLSchemes returns the schemes OpenURL can open, sorted.
func URLSchemes() []string { return openers.Schemes() }

// ErrNoURLStore marks a URL whose scheme no imported store package
// registered: its store keeps no records here.
var ErrNoURLStore = errors.New("idem: no record store for this URL")

// OpenURL opens the record Store in the store rawURL names: the URL of a
// lock backend (redis://, postgres://, mysql://, ...) as distlock.Open
// takes it, its parameters read by that backend's ParseURL. Import the
// store packages of the schemes a program opens, usually blank:
//
//	import _ "github.com/distlock/distlock/idem/redisstore"
//
// A scheme none registered is an error matching ErrNoURLStore. closeStore
// closes the connections the Store uses.
func OpenURL(ctx context.Context, rawURL string) (_ Store, closeStore func(), _ error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("idem: %w: %w", driver.ErrInvalidOption, err)
	}
	f, _, ok := openers.Lookup(u.Scheme)
	if !ok || f == nil {
		return nil, nil, fmt.Errorf("%w: %s (records are kept in %s)", ErrNoURLStore, driver.RedactURL(u), strings.Join(URLSchemes(), ", "))
	}
	return f(ctx, u)
}
