package distlock

import "context"

// Policy governs requests before they reach the store. Apply may adjust r
// (set Group and Critical, clamp values) or refuse it with an error matching
// ErrInvalidOption or ErrDegraded. It runs before validation, so a clamped
// value is still checked. Package policy provides one (groups, limits,
// degradation).
type Policy interface {
	Apply(ctx context.Context, r *Request) error
}
