package server

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxLimiters bounds the per-tenant limiters kept. Tenants come from the
// keyring, so the bound is only reached by a keyring of that many tenants;
// then idle limiters (at full burst, so forgetting them loses nothing) go.
const maxLimiters = 10000

// limiters holds one token bucket per tenant, created at the tenant's first
// call.
type limiters struct {
	limit rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newLimiters(limit rate.Limit, burst int) *limiters {
	return &limiters{limit: limit, burst: burst, m: make(map[string]*rate.Limiter)}
}

// allow takes a token from tenant's bucket, reporting false if it is empty.
func (l *limiters) allow(tenant string) bool {
	if l.limit == rate.Inf {
		return true
	}
	now := time.Now()
	l.mu.Lock()
	lim, ok := l.m[tenant]
	if !ok {
		if len(l.m) >= maxLimiters {
			l.forgetIdle(now)
		}
		lim = rate.NewLimiter(l.limit, l.burst)
		l.m[tenant] = lim
	}
	l.mu.Unlock()
	return lim.AllowN(now, 1)
}

// forgetIdle drops the limiters whose buckets are full, and if none is,
// an arbitrary half: a bound on memory matters more than a tenant's few
// extra calls. l.mu is held.
func (l *limiters) forgetIdle(now time.Time) {
	for t, lim := range l.m {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.m, t)
		}
	}
	for t := range l.m {
		if len(l.m) < maxLimiters/2 {
			return
		}
		delete(l.m, t)
	}
}
