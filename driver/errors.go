package driver

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Every error returned by this package and its backends that
// corresponds to one of these matches it with errors.Is, and starts with it
// (see Backend).
var (
	// ErrNotAcquired means the lock is held by someone else and the wait ended.
	ErrNotAcquired = errors.New("distlock: not acquired")
	// ErrLockLost means a held lock ended without Release: its renewal was
	// refused, the store dropped it, its validity ran out, or MaxHold was reached.
	ErrLockLost = errors.New("distlock: lock lost")
	// ErrNotHeld means the token does not hold the key (any more), or the lock
	// was already released.
	ErrNotHeld = errors.New("distlock: not held")
	// ErrInvalidKey means the key is empty, longer than MaxKeyLen bytes, not
	// UTF-8, or contains control characters.
	ErrInvalidKey = errors.New("distlock: invalid key")
	// ErrInvalidOption means an option value is out of range.
	ErrInvalidOption = errors.New("distlock: invalid option")
	// ErrDegraded means a policy refused a non-critical lock because the store
	// is too slow right now.
	ErrDegraded = errors.New("distlock: degraded")
	// ErrClosed means the client or the backend was closed.
	ErrClosed = errors.New("distlock: closed")
	// ErrNoSchema means the store lacks a table (or another object) the
	// backend needs and does not create on its own: the backend's Migrate,
	// or distlock migrate, creates it.
	ErrNoSchema = errors.New("distlock: no schema")
)

// Wrap returns err, from a backend's call to its store, as the backend
// returns it (see Backend): as it is if it matches a sentinel, which it
// starts with, or if it already starts with the backend's name, else after
// the backend's name, as in "redislock: dial tcp …". So a backend may wrap
// an error at each layer it passes and still name itself once. It returns
// nil for a nil err.
func Wrap(backend string, err error) error {
	if err == nil {
		return nil
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return err
		}
	}
	if strings.HasPrefix(err.Error(), backend+": ") {
		return err
	}
	return fmt.Errorf("%s: %w", backend, err)
}

// sentinels are the errors Wrap passes on as they are.
var sentinels = []error{ErrNotAcquired, ErrLockLost, ErrNotHeld, ErrInvalidKey, ErrInvalidOption, ErrDegraded, ErrClosed, ErrNoSchema}
