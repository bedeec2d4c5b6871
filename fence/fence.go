package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/distlock/distlock/occ"
)

// ErrStale means a write carried a fence older than the last one accepted
// for its key: its lock was lost and someone else has held the key since.
var ErrStale = errors.New("fence: stale fence")

// Token is a fence together with the key whose lock issued it.
type Token struct {
	Key   string
	Fence uint64
}

// Checker accepts or rejects the fence of a write. Check returns nil and
// records t if t.Fence is not older than the last fence accepted for t.Key,
// and an error matching ErrStale otherwise, recording nothing.
type Checker interface {
	Check(ctx context.Context, t Token) error
}

// Guard is an in-memory Checker: the last accepted fence per key, in one
// process. It keeps one entry per key it has seen. The zero value is ready.
type Guard struct {
	mu   sync.Mutex
	last map[string]uint64
}

var _ Checker = (*Guard)(nil)

// Check accepts t if its fence is at least the last accepted for its key.
func (g *Guard) Check(_ context.Context, t Token) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if last := g.last[t.Key]; t.Fence < last {
		return fmt.Errorf("fence: key %q: %w: %d is older than %d", t.Key, ErrStale, t.Fence, last)
	}
	if g.last == nil {
		g.last = make(map[string]uint64)
	}
	g.last[t.Key] = t.Fence
	return nil
}

// Last returns the last fence accepted for key, 0 if none.
func (g *Guard) Last(key string) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.last[key]
}

// Write runs a fenced update that names one row and compares its fence
// column with the write's fence, such as
//
//	UPDATE accounts SET balance = $3, last_fence = $2
//	WHERE id = $1 AND last_fence <= $2
//
// and returns an error matching ErrStale if it changed no row: the row holds
// a newer fence (or is gone). u is occ.SQL(db) or occ.Pgx(pool.Exec).
func Write(ctx context.Context, u occ.Updater, query string, args ...any) error {
	n, err := u.Update(ctx, query, args...)
	switch {
	case err != nil:
		return fmt.Errorf("fence: write: %w", err)
	case n == 0:
		return fmt.Errorf("fence: write: %w: the row holds a newer fence", ErrStale)
	}
	return nil
}

type tokenKey struct{}

// NewContext returns a context carrying t, for Transport and the gRPC client
// interceptor to send along.
func NewContext(ctx context.Context, t Token) context.Context {
	return context.WithValue(ctx, tokenKey{}, t)
}

// FromContext returns the token carried by ctx: set by NewContext, or by
// Middleware and the gRPC server interceptor once accepted.
func FromContext(ctx context.Context) (Token, bool) {
	t, ok := ctx.Value(tokenKey{}).(Token)
	return t, ok
}
