package server

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"connectrpc.com/connect"

	"github.com/distlock/distlock/cmd/distlock/internal/auth"
)

// errEnded is the cause of a call the server ended before its caller did:
// its token was removed from the keyring, or it reached its lifetime. The
// outcome interceptor returns it instead of the cancellation it caused.
type errEnded struct{ err *connect.Error }

func (e errEnded) Error() string { return e.err.Error() }

// endedBy returns the error the server ended ctx's call with, if it did.
func endedBy(ctx context.Context) (*connect.Error, bool) {
	var e errEnded
	if errors.As(context.Cause(ctx), &e) {
		return e.err, true
	}
	return nil, false
}

// liveCalls are the calls in progress, so that a keyring reload can end the
// ones whose token is gone or whose role no longer allows them: a removed
// token keeps nothing open, neither a Watch stream nor an Acquire's wait.
type liveCalls struct {
	mu    sync.Mutex
	calls map[*liveCall]struct{}
}

// liveCall is one call in progress.
type liveCall struct {
	id     auth.Identity
	action auth.Action
	end    context.CancelCauseFunc
}

// add registers c until the returned function is called.
func (l *liveCalls) add(c *liveCall) (remove func()) {
	l.mu.Lock()
	if l.calls == nil {
		l.calls = make(map[*liveCall]struct{})
	}
	l.calls[c] = struct{}{}
	l.mu.Unlock()
	return func() {
		l.mu.Lock()
		delete(l.calls, c)
		l.mu.Unlock()
	}
}

// revoke ends every call whose token k no longer holds with the same tenant
// and a role that allows the call, with Unauthenticated or
// PermissionDenied.
func (l *liveCalls) revoke(k *auth.Keyring) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.calls {
		l.recheck(k, c.id, c.action, c.end)
	}
}

// recheck ends a call of id doing action with end if k no longer allows it.
func (*liveCalls) recheck(k *auth.Keyring, id auth.Identity, action auth.Action, end context.CancelCauseFunc) {
	now, ok := k.Identity(id.Credential)
	switch {
	case !ok || now.Tenant != id.Tenant:
		end(errEnded{connect.NewError(connect.CodeUnauthenticated,
			errors.New("the call's bearer token was removed from the token file"))})
	case !now.Role.Allows(action):
		end(errEnded{connect.NewError(connect.CodePermissionDenied,
			fmt.Errorf("the call's bearer token is now of role %s, which may not %s", now.Role, action))})
	}
}
