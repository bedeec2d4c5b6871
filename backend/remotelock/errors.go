package remotelock

import (
	"errors"
	"fmt"
	"strings"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/driver"
)

// fail turns the error of a call of op on key into the driver's: a
// sentinel where the service's code names one, driver.ErrClosed once Close
// ended the call or began, else the error wrapped.
func (b *Backend) fail(c *call, op, key string, err error) error {
	if c != nil && c.closedByClose() {
		return fmt.Errorf("remotelock: %s %q: %w", op, key, driver.ErrClosed)
	}
	var sentinel error
	switch connect.CodeOf(err) {
	case connect.CodeAborted:
		sentinel = driver.ErrNotAcquired
	case connect.CodeNotFound:
		sentinel = driver.ErrNotHeld
	case connect.CodeInvalidArgument:
		sentinel = driver.ErrInvalidOption
		if strings.Contains(message(err), "invalid key") {
			sentinel = driver.ErrInvalidKey
		}
	case connect.CodeUnavailable:
		if b.isClosed() {
			sentinel = driver.ErrClosed
		}
	}
	if sentinel == nil {
		return fmt.Errorf("remotelock: %s %q: %w", op, key, err)
	}
	if msg := message(err); msg != "" {
		return fmt.Errorf("remotelock: %s %q: %w (service: %s)", op, key, sentinel, msg)
	}
	return fmt.Errorf("remotelock: %s %q: %w", op, key, sentinel)
}

// message is the service's message of a connect error, without the
// "distlock: " the service's errors begin with.
func message(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	return strings.TrimPrefix(ce.Message(), "distlock: ")
}

// definite reports whether an acquisition that failed with err certainly
// took nothing: the service answered with a code that says it refused the
// request. Any other failure (no answer, a cut stream, a store failure the
// service reports as UNAVAILABLE or INTERNAL) may have left the lock held.
func definite(err error) bool {
	switch connect.CodeOf(err) {
	case connect.CodeAborted, connect.CodeInvalidArgument, connect.CodeNotFound,
		connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeResourceExhausted,
		connect.CodeFailedPrecondition, connect.CodeUnimplemented, connect.CodeOutOfRange,
		connect.CodeAlreadyExists:
		return true
	}
	return false
}
