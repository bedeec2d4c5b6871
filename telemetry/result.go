package telemetry

import (
	"errors"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/observe"
)

// Acquisition results, the values of the result label of
// distlock_acquisitions_total.
const (
	ResultAcquired    = "acquired"     // the lock was granted
	ResultNotAcquired = "not_acquired" // the key stayed held until the wait ended
	ResultError       = "error"        // the store failed, or a policy refused the request as invalid
	ResultDegraded    = "degraded"     // a policy refused a non-critical request: the store is slow
)

// acquireResult classifies an event that ends an acquisition; ok is false
// for other kinds.
func acquireResult(e observe.Event) (result string, ok bool) {
	switch e.Kind {
	case observe.Acquired:
		return ResultAcquired, true
	case observe.NotAcquired:
		switch {
		case errors.Is(e.Err, distlock.ErrDegraded):
			return ResultDegraded, true
		case e.Err != nil && !errors.Is(e.Err, distlock.ErrNotAcquired):
			return ResultError, true
		}
		return ResultNotAcquired, true
	case observe.AcquireFailed:
		return ResultError, true
	}
	return "", false
}
