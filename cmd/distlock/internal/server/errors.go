package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/distlock/distlock"
)

// errShutdown is the error of every call refused or ended by Shutdown.
func errShutdown() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("the server is shutting down: retry on another"))
}

// invalid is an InvalidArgument error about a request's field.
func invalid(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// storeError maps an error of the distlock client about the store key sk
// (the client key key, in the caller's words) to a Connect error:
//
//	shutdown, ErrClosed, ErrDegraded, a store failure   Unavailable
//	ErrInvalidKey, ErrInvalidOption                     InvalidArgument
//	ErrNotAcquired                                      Aborted
//	ErrNotHeld                                          NotFound
//	errors.ErrUnsupported                               Unimplemented
//	the call's deadline                                 DeadlineExceeded
//	the call's cancellation                             Canceled
//
// Its message names key, never sk: a caller sees no namespace.
func (s *Server) storeError(ctx context.Context, op, key, sk string, err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), strconv.Quote(sk), strconv.Quote(key))
	msg = strings.ReplaceAll(msg, sk, key)
	code := connect.CodeUnavailable
	switch {
	case s.stopping.Load() && ctx.Err() == nil && errors.Is(err, context.Canceled):
		return errShutdown()
	case s.stopping.Load() && errors.Is(err, distlock.ErrClosed):
		return errShutdown()
	case errors.Is(err, distlock.ErrInvalidKey), errors.Is(err, distlock.ErrInvalidOption):
		code = connect.CodeInvalidArgument
	case errors.Is(err, distlock.ErrNotAcquired):
		code = connect.CodeAborted
	case errors.Is(err, distlock.ErrNotHeld):
		code = connect.CodeNotFound
	case errors.Is(err, errors.ErrUnsupported):
		code = connect.CodeUnimplemented
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		code = connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		code = connect.CodeCanceled
	}
	if op != "" && !strings.Contains(msg, strconv.Quote(key)) {
		msg = op + " " + strconv.Quote(key) + ": " + msg
	}
	return connect.NewError(code, errors.New(msg))
}
