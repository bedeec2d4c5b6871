package driver

import (
	"context"
	"fmt"
)

// MaxAcquireAll is the most keys one MultiAcquirer.AcquireAll takes.
const MaxAcquireAll = 64

// MultiAcquirer is implemented by backends that can take several keys in
// one request, all or none (one Redis script, one etcd transaction). The
// client's LockAll tries the keys of a set this way, in one round trip
// instead of one per key; each key granted is still a hold of its own
// (its own token, fence and time to live), renewed and released as
// Acquire's grants are.
type MultiAcquirer interface {
	// AcquireAll makes one attempt to take every key of reqs, each as
	// Acquire would take it alone (its token, TTL and metadata), and
	// returns their grants in reqs' order: all of them, or none. If
	// another token holds a key it takes none and returns a *HeldError
	// naming the first such key in reqs' order. A retry whose first reply
	// was lost is either refused or granted again with the same fences,
	// renewing the holds, as with Acquire. reqs holds 2 to MaxAcquireAll
	// distinct valid keys (ValidateAcquireAll) that AcquiresTogether
	// accepts; any other set is refused with an
	// error matching ErrInvalidOption or errors.ErrUnsupported, and
	// changes nothing.
	AcquireAll(ctx context.Context, reqs []AcquireRequest) ([]Grant, error)
	// AcquiresTogether reports whether AcquireAll can take keys in one
	// request. A store may not (keys that live on different nodes of a
	// cluster): the client then takes them one by one.
	AcquiresTogether(keys []string) bool
}

// HeldError is MultiAcquirer.AcquireAll's refusal: Key is held by another
// token, so no key of the set was taken. It matches ErrNotAcquired.
type HeldError struct {
	Key string
}

func (e *HeldError) Error() string { return fmt.Sprintf("%v: %q is held", ErrNotAcquired, e.Key) }

// Unwrap returns ErrNotAcquired.
func (e *HeldError) Unwrap() error { return ErrNotAcquired }

// ValidateAcquireAll returns an error matching ErrInvalidOption unless reqs
// holds 2 to MaxAcquireAll requests of distinct keys with tokens and
// positive TTLs, or one matching ErrInvalidKey for an invalid key.
func ValidateAcquireAll(reqs []AcquireRequest) error {
	if len(reqs) < 2 || len(reqs) > MaxAcquireAll {
		return fmt.Errorf("%w: %d keys, want 2 to %d", ErrInvalidOption, len(reqs), MaxAcquireAll)
	}
	seen := make(map[string]bool, len(reqs))
	for _, r := range reqs {
		switch err := ValidateKey(r.Key); {
		case err != nil:
			return fmt.Errorf("%w (key %q)", err, r.Key)
		case seen[r.Key]:
			return fmt.Errorf("%w: key %q named twice", ErrInvalidOption, r.Key)
		case r.Token == "":
			return fmt.Errorf("%w: key %q has no token", ErrInvalidOption, r.Key)
		case r.TTL <= 0:
			return fmt.Errorf("%w: key %q has a time to live of %v", ErrInvalidOption, r.Key, r.TTL)
		}
		seen[r.Key] = true
	}
	return nil
}
