package occ

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/distlock/distlock"
)

// ErrConflict means the data changed between the read and the write: the
// version did not match. Retry retries it; any other error stops Retry.
var ErrConflict = errors.New("occ: conflict")

// Policy bounds Retry. The zero value uses the defaults.
type Policy struct {
	// MaxAttempts is the most calls of fn, the first included. The default
	// is 10.
	MaxAttempts int
	// BaseDelay is the backoff ceiling after the first conflict; it doubles
	// after each. The default is 1ms.
	BaseDelay time.Duration
	// MaxDelay caps the backoff ceiling. The default is 100ms.
	MaxDelay time.Duration
}

func (p Policy) withDefaults() (Policy, error) {
	if p.MaxAttempts < 0 || p.BaseDelay < 0 || p.MaxDelay < 0 {
		return p, fmt.Errorf("occ: policy %+v: %w: negative value", p, distlock.ErrInvalidOption)
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 10
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = time.Millisecond
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = 100 * time.Millisecond
	}
	if p.MaxDelay < p.BaseDelay {
		return p, fmt.Errorf("occ: policy %+v: %w: max delay under base delay", p, distlock.ErrInvalidOption)
	}
	return p, nil
}

// Retry calls fn until it returns nil or an error that does not match
// ErrConflict, at most p.MaxAttempts times. After the n-th conflict it sleeps
// a random time in [0, min(MaxDelay, BaseDelay*2^(n-1))] (full jitter), so
// competing writers spread out. It stops early when ctx ends, returning the
// last conflict joined with ctx.Err(). A policy with negative values returns
// an error matching distlock.ErrInvalidOption without calling fn.
func Retry(ctx context.Context, p Policy, fn func(ctx context.Context) error) error {
	p, err := p.withDefaults()
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil || !errors.Is(err, ErrConflict) {
			return err
		}
		if attempt == p.MaxAttempts {
			return fmt.Errorf("occ: gave up after %d attempts: %w", attempt, err)
		}
		ceil := min(p.MaxDelay, p.BaseDelay<<min(attempt-1, 30))
		t := time.NewTimer(rand.N(ceil + 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}
