package driver

import (
	"context"
	"time"
)

// Ended reports whether ctx has ended or its deadline has passed. A call
// that ctx's deadline cuts short by a timeout of its own (a dial, a socket
// read given the deadline) may fail a moment before ctx's timer ends ctx,
// while ctx.Err() is still nil: a wait tells the end of its own time from
// a store failure with Ended, not with ctx.Err() alone.
func Ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
