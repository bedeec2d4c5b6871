// Package floor is what distlock bench --floor measures a backend against:
// a store's raw commands for taking and releasing a lock, in the fewest
// round trips, without the client's token, retries, watchdog or telemetry.
//
// The floor of a store lives beside its backend, in the backend's tool
// package (backend/redislock/redistool, ...), which registers it for the
// store's URL schemes from init, as the backend registers itself with
// distlock.Register; a scheme without a floor says so, and why, with None.
// A program imports the tool packages of the stores it measures, usually
// blank:
//
//	import _ "github.com/distlock/distlock/backend/redislock/redistool"
package floor

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/distlock/distlock/driver"
	"github.com/distlock/distlock/internal/registry"
)

// Target is a store's raw commands for one lock. Lock is called by
// Config.Workers goroutines at once, each with its own worker number.
type Target interface {
	// Lock tries once to take key for worker w (0 ≤ w < Config.Workers),
	// never waiting for a held key. It returns the release, or an error
	// matching distlock.ErrNotAcquired if the key is held. The release
	// fails with an error matching distlock.ErrNotHeld if the lock was
	// lost meanwhile.
	Lock(ctx context.Context, w int, key string) (release func(context.Context) error, err error)
	// Close frees what Open took: connections, sessions, leases, and any
	// key the floor made for itself.
	Close() error
}

// Config is what a floor is opened with.
type Config struct {
	// Workers is how many goroutines call Lock, numbered from 0.
	Workers int
	// Clients is how many connections (or sessions) the floor opens;
	// worker w uses connection w mod Clients, as the distlock side's
	// workers share its clients.
	Clients int
	// Lease is the lease of every lock the floor takes, where the store
	// has leases.
	Lease time.Duration
	// Backend is the backend of the distlock side's first client: the floor
	// of an in-process store takes its locks in that store.
	Backend driver.Backend
}

// OpenFunc opens the floor of the store u names, whose scheme it was
// registered for. It reads the URL with the backend's ParseURL, so that
// it refuses, in the backend's words, every URL distlock.Open refuses.
type OpenFunc func(ctx context.Context, u *url.URL, cfg Config) (Target, error)

// ErrNoFloor means the floor of a store is not known: its scheme is not
// registered, or declared with None.
var ErrNoFloor = errors.New("floor: no floor for this store")

// KeyPrefix prefixes every key a floor writes, so that its keys never meet
// the distlock side's.
const KeyPrefix = "distlock-bench-floor/"

// floors holds the registered floors by URL scheme.
var floors = registry.New[OpenFunc]("floor")

// Register makes open the floor of URLs of scheme. Tool packages call it
// from init. It panics if open is nil or scheme is already registered (by
// Register or None).
func Register(scheme string, open OpenFunc) {
	if open == nil {
		panic("floor: Register needs an open function")
	}
	floors.Add(scheme, open)
}

// None declares that scheme has no floor, and why: Open and Known then fail
// with ErrNoFloor and the reason. It panics if reason is empty or scheme is
// already registered.
func None(scheme, reason string) { floors.Decline(scheme, reason) }

// Schemes returns the schemes that have a floor, sorted.
func Schemes() []string { return floors.Schemes() }

// Declined returns the schemes declared with None, with their reasons.
func Declined() map[string]string { return floors.Declined() }

// Known reports whether the floor of the store at rawURL is known, without
// touching the store: nil if it is, else an error matching ErrNoFloor.
func Known(rawURL string) error {
	_, _, err := lookup(rawURL)
	return err
}

// Open opens the floor of the store at rawURL. An unknown floor fails with
// an error matching ErrNoFloor before anything is dialled.
func Open(ctx context.Context, rawURL string, cfg Config) (Target, error) {
	u, open, err := lookup(rawURL)
	if err != nil {
		return nil, err
	}
	t, err := open(ctx, u, cfg)
	if err != nil {
		return nil, fmt.Errorf("floor: open the floor of %s: %w", driver.RedactURL(u), err)
	}
	return t, nil
}

// lookup returns the parsed URL and the floor of rawURL.
func lookup(rawURL string) (*url.URL, OpenFunc, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %q is not a URL", ErrNoFloor, driver.Redact(rawURL))
	}
	open, reason, ok := floors.Lookup(u.Scheme)
	switch {
	case !ok:
		return nil, nil, fmt.Errorf("%w: %q (the floor is known for %s)", ErrNoFloor, u.Scheme+"://", strings.Join(Schemes(), ", "))
	case open == nil:
		return nil, nil, fmt.Errorf("%w: %q: %s (the floor is known for %s)", ErrNoFloor, u.Scheme+"://", reason, strings.Join(Schemes(), ", "))
	}
	return u, open, nil
}

// Tokens returns a token for each of n workers: a floor compares worker
// w's token on release like a lock's token, but makes none per attempt.
func Tokens(n int) []string {
	t := make([]string, n)
	for i := range t {
		t[i] = "bench-floor-" + strconv.Itoa(i)
	}
	return t
}
