package remotelock

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/driver"
)

// fail turns the error of a call into the driver's: a sentinel
// where the service's code names one, driver.ErrClosed once Close ended the
// call or began, else the error wrapped. Of the service's message it keeps
// what the client does not say itself (see said).
func (b *Backend) fail(c *call, err error) error {
	if c != nil && c.closedByClose() {
		return driver.ErrClosed
	}
	var sentinel error
	switch connect.CodeOf(err) {
	case connect.CodeAborted:
		sentinel = driver.ErrNotAcquired
	case connect.CodeNotFound:
		sentinel = driver.ErrNotHeld
	case connect.CodeUnimplemented:
		sentinel = errors.ErrUnsupported
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
	rest := said(err, sentinel)
	switch {
	case sentinel != nil && rest == "":
		return sentinel
	case sentinel != nil:
		return fmt.Errorf("%w: %s", sentinel, rest)
	case connect.IsWireError(err) && rest != "":
		return &serviceError{msg: "remotelock: " + connect.CodeOf(err).String() + ": " + rest, err: err}
	}
	return fmt.Errorf("remotelock: %w", err)
}

// serviceError is an error the service answered, said without what the
// client says itself; it unwraps to the *connect.Error.
type serviceError struct {
	msg string
	err error
}

func (e *serviceError) Error() string { return e.msg }
func (e *serviceError) Unwrap() error { return e.err }

// said is the service's message of err without what the client that
// returns the error says itself: the service's messages begin with the
// operation and the key, as in `distlock: release "k": not held: …`, and
// the client names those once, and the sentinel.
func said(err error, sentinel error) string {
	msg := strings.TrimPrefix(serviceHead.ReplaceAllString(message(err), ""), "distlock: ")
	if sentinel != nil {
		text := strings.TrimPrefix(sentinel.Error(), "distlock: ")
		if msg == text {
			return ""
		}
		msg = strings.TrimPrefix(msg, text+": ")
	}
	return msg
}

// serviceHead matches the operation and the quoted key a service's message
// begins with.
var serviceHead = regexp.MustCompile(`^[a-z ]+ "(?:[^"\\]|\\.)*": `)

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
