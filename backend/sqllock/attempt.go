package sqllock

import (
	"context"
	"errors"
	"sync"
	"time"
)

// An attempt's statement is not cut short by its caller's context. When
// the context of a statement ends, the driver drops the connection and
// returns at once, but the server does not drop the statement with it:
// MariaDB and MySQL notice that go-sql-driver/mysql closed the socket only
// when they next read from it or write to it, after the statement, and
// pgx asks PostgreSQL to cancel it only afterwards, in the background,
// which does nothing to a statement the server has not begun. A statement
// still on its way, or waiting for a lock (on MariaDB and MySQL the fence
// floor's row, which cleanup locks while it raises the floor), then runs
// after its caller was told the key was not acquired, and after the
// client's release of its token found nothing to release: it takes the
// key, for a whole lease, under a token nobody holds, and the backend's
// own next attempt fails.
//
// So the statement runs on a context of its own, bounded by the request
// timeout. A caller whose context ends first gets its context's error at
// once, and the statement ends in the background: if it took the key, or
// failed without saying whether it did, its token is released there. Until
// then the key counts as pending, and the backend's next attempt on it
// waits, within that attempt's context. Close waits for such a statement
// and its release, at most two request timeouts. The cost is a goroutine
// per attempt whose context can end. A statement that outlives the request
// timeout is cut all the same, and may still take the key in the server
// afterwards, for one lease.

// grantDetached runs the acquisition statement q of key for token (args
// are q's arguments) and returns the fence it granted, 0 if the key is
// held. The statement is not cut short when ctx ends: grantDetached then
// returns ctx's error, and the statement ends in the background (see
// above).
func (b *Backend) grantDetached(ctx context.Context, key, token, q string, args ...any) (uint64, error) {
	if ctx.Done() == nil { // nothing can end it before the request timeout
		return b.d.grant(ctx, b, q, args...)
	}
	a := &detached{res: make(chan detachedResult, 1)}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.opts.requestTimeout)
	run := func() {
		fence, err := b.d.grant(sctx, b, q, args...)
		cancel()
		if a.answer(detachedResult{fence, err}) {
			return
		}
		defer b.cut.end(key)
		if err != nil || fence != 0 {
			b.releaseDetached(key, token)
		}
	}
	if !b.background(run) {
		cancel()
		return 0, errClosed
	}
	select {
	case r := <-a.res:
		return r.fence, r.err
	case <-ctx.Done():
	}
	if r, ok := a.leave(b, key); ok { // it ended as ctx did
		return r.fence, r.err
	}
	return 0, ctx.Err()
}

// detached is an attempt whose statement runs in the background.
type detached struct {
	mu   sync.Mutex
	left bool // the caller left; the background ends the attempt
	res  chan detachedResult
}

type detachedResult struct {
	fence uint64
	err   error
}

// answer hands r to the caller, unless the caller left; it reports
// whether it did.
func (a *detached) answer(r detachedResult) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.left {
		return false
	}
	a.res <- r
	return true
}

// leave returns the attempt's result if it came, or else counts key as
// pending for b until the background has ended the attempt.
func (a *detached) leave(b *Backend, key string) (detachedResult, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	select {
	case r := <-a.res:
		return r, true
	default:
	}
	a.left = true
	b.cut.start(key)
	return detachedResult{}, false
}

// releaseDetached releases key for the token of an attempt whose caller
// left, within the request timeout. It uses no prepared statement, which
// the backend refuses once Close has begun, so that it runs during Close
// too: Close closes the database handle only after the background ended.
func (b *Backend) releaseDetached(key, token string) {
	ctx, cancel := context.WithTimeout(context.Background(), b.opts.requestTimeout)
	defer cancel()
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		_, err := b.db.ExecContext(ctx, b.d.release, key, token)
		if err == nil || ctx.Err() != nil || errors.Is(err, errDBClosed) {
			return
		}
		t := time.NewTimer(wait) // a failed release is retried until the timeout
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
