package distlock

import (
	"errors"
	"strconv"
	"strings"

	"github.com/distlock/distlock/driver"
)

// Sentinel errors. Every error returned by this package and its backends that
// corresponds to one of these matches it with errors.Is; one about a key is a
// KeyError, which names the key. They are the same values as package
// driver's, which backends return.
var (
	// ErrNotAcquired means the lock is held by someone else and the wait ended.
	ErrNotAcquired = driver.ErrNotAcquired
	// ErrLockLost means a held lock ended without Release: its renewal was
	// refused, the store dropped it, its validity ran out, or MaxHold was reached.
	ErrLockLost = driver.ErrLockLost
	// ErrNotHeld means the token does not hold the key (any more), or the lock
	// was already released.
	ErrNotHeld = driver.ErrNotHeld
	// ErrInvalidKey means the key is empty, longer than MaxKeyLen bytes, not
	// UTF-8, or contains control characters.
	ErrInvalidKey = driver.ErrInvalidKey
	// ErrInvalidOption means an option value is out of range.
	ErrInvalidOption = driver.ErrInvalidOption
	// ErrDegraded means a policy refused a non-critical lock because the store
	// is too slow right now.
	ErrDegraded = driver.ErrDegraded
	// ErrClosed means the client (or its backend) was closed.
	ErrClosed = driver.ErrClosed
	// ErrNoSchema means the store lacks a table the backend needs and does
	// not create on its own (the lease table of sqllock, DynamoDB's table):
	// create it with the backend's Migrate (dynamolock.CreateTable), or
	// distlock migrate URL.
	ErrNoSchema = driver.ErrNoSchema
)

// KeyError is an error about one key: Op is what was attempted ("lock",
// "acquire permit", "read-lock", "write-lock", "release", "renew",
// "extend", "inspect", "force release", "list" with the prefix as Key),
// Key the key (a semaphore's or read-write lock's name), and Err the cause, which matches the
// sentinels above where one applies. It is the one place that names the
// operation and the key: the cause, a backend's error among them, names
// neither, and starts with its sentinel where it has one, as in
//
//	distlock: release "gc1": not held: the lease had expired
type KeyError struct {
	Op  string
	Key string
	Err error
}

// Error says "distlock:" once, then the operation, the key and the cause.
func (e *KeyError) Error() string {
	return "distlock: " + e.Op + " " + strconv.Quote(e.Key) + ": " + strings.TrimPrefix(e.Err.Error(), "distlock: ")
}

// Unwrap returns the cause.
func (e *KeyError) Unwrap() error { return e.Err }

// causedBy is err, a sentinel or an error that starts with one, because of
// cause, which starts with a sentinel too: "distlock: lock lost: not held"
// says "distlock:" once and matches both.
func causedBy(err, cause error) error { return &causedError{err, cause} }

type causedError struct{ err, cause error }

func (e *causedError) Error() string {
	return e.err.Error() + ": " + strings.TrimPrefix(e.cause.Error(), "distlock: ")
}

func (e *causedError) Unwrap() []error { return []error{e.err, e.cause} }

// keyErr wraps err in a KeyError, unless it already is one for key.
func keyErr(op, key string, err error) error {
	var ke *KeyError
	if errors.As(err, &ke) && ke.Key == key {
		return err
	}
	return &KeyError{Op: op, Key: key, Err: err}
}
