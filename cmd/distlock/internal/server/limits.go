package server

import (
	"fmt"
	"math"
	"time"

	"github.com/distlock/distlock"
	"golang.org/x/time/rate"
)

// namespaceOverhead is the longest namespace a client key gets in the store:
// "tenants/" plus a 63-character tenant and its "/", with a byte to spare.
const namespaceOverhead = len("tenants/") + 64 + 1

// Defaults of Limits, used where a field is zero.
const (
	DefaultMaxKeyLen       = distlock.MaxKeyLen - namespaceOverhead // 439
	DefaultMaxLabels       = 32
	DefaultMaxLabelLen     = 256
	DefaultMaxRequestBytes = 1 << 20
	DefaultMaxLease        = time.Hour
	DefaultMaxWait         = 5 * time.Minute
	DefaultPageSize        = 100
	DefaultMaxPageSize     = 1000
	DefaultWatchInterval   = 250 * time.Millisecond
	DefaultMaxWaiters      = 1000
	DefaultMaxStreams      = 64
	DefaultMaxStreamLife   = time.Hour
)

// Limits bounds what a request may ask. A zero field takes its default.
type Limits struct {
	// MaxKeyLen is the longest client key, in bytes. The default and the
	// maximum is DefaultMaxKeyLen: the store's 512 bytes less the longest
	// tenant namespace.
	MaxKeyLen int
	// MaxLabels is the most labels a lock may carry. The default is 32.
	MaxLabels int
	// MaxLabelLen is the longest label name or value, owner or business id,
	// in bytes. The default is 256.
	MaxLabelLen int
	// MaxRequestBytes is the largest request message. The default is 1 MiB.
	MaxRequestBytes int
	// MaxLease is the longest lease or session TTL. The default is 1h.
	MaxLease time.Duration
	// MaxWait is the longest wait of an Acquire. The default is 5m.
	MaxWait time.Duration
	// DefaultLease is the lease of an Acquire, and the TTL of a session, that
	// names none. The default is distlock.DefaultLease (30s).
	DefaultLease time.Duration
	// RatePerTenant is the calls per second each tenant may make, on average.
	// Zero or math.Inf(1) sets no limit, the default: the caps on waiters and
	// streams bound what a tenant holds, and a limit on rate is a choice for
	// a deployment that shares one store among tenants.
	RatePerTenant float64
	// Burst is how many calls a tenant over RatePerTenant may make at once.
	// The default is twice the rate, and at least 1.
	Burst int
	// PageSize is a List page's size when the request names none. The
	// default is 100, or MaxPageSize if that is less.
	PageSize int
	// MaxPageSize is the largest List page. The default is 1000.
	MaxPageSize int
	// WatchInterval is how often a Watch polls the store. The default is 250ms.
	WatchInterval time.Duration
	// MaxWaitersPerTenant is the most Acquire calls that wait at once per
	// tenant; one more is refused with ResourceExhausted. The default is
	// 1000.
	MaxWaitersPerTenant int
	// MaxStreamsPerTenant is the most Watch streams open at once per
	// tenant; one more is refused with ResourceExhausted. The default is 64.
	MaxStreamsPerTenant int
	// MaxStreamLifetime is how long a Watch stream may stay open; it then
	// ends with Unavailable, and the client opens it again, authenticated
	// anew. The default is 1h.
	MaxStreamLifetime time.Duration
}

// withDefaults fills in the zero fields and checks the others.
func (l Limits) withDefaults() (Limits, error) {
	setInt := func(v *int, def int) {
		if *v == 0 {
			*v = def
		}
	}
	setDur := func(v *time.Duration, def time.Duration) {
		if *v == 0 {
			*v = def
		}
	}
	setInt(&l.MaxKeyLen, DefaultMaxKeyLen)
	setInt(&l.MaxLabels, DefaultMaxLabels)
	setInt(&l.MaxLabelLen, DefaultMaxLabelLen)
	setInt(&l.MaxRequestBytes, DefaultMaxRequestBytes)
	setDur(&l.MaxLease, DefaultMaxLease)
	setDur(&l.MaxWait, DefaultMaxWait)
	setDur(&l.DefaultLease, distlock.DefaultLease)
	if l.RatePerTenant == 0 {
		l.RatePerTenant = math.Inf(1)
	}
	if !math.IsInf(l.RatePerTenant, 1) && l.RatePerTenant > 0 {
		setInt(&l.Burst, max(int(math.Ceil(2*l.RatePerTenant)), 1))
	}
	setInt(&l.MaxPageSize, DefaultMaxPageSize)
	setInt(&l.PageSize, min(DefaultPageSize, l.MaxPageSize))
	setDur(&l.WatchInterval, DefaultWatchInterval)
	setInt(&l.MaxWaitersPerTenant, DefaultMaxWaiters)
	setInt(&l.MaxStreamsPerTenant, DefaultMaxStreams)
	setDur(&l.MaxStreamLifetime, DefaultMaxStreamLife)

	bad := func(format string, args ...any) (Limits, error) {
		return Limits{}, fmt.Errorf("server: limits: "+format+": %w", append(args, distlock.ErrInvalidOption)...)
	}
	switch {
	case l.MaxKeyLen < 0 || l.MaxKeyLen > DefaultMaxKeyLen:
		return bad("max key length %d is outside 1..%d", l.MaxKeyLen, DefaultMaxKeyLen)
	case l.MaxLabels < 0, l.MaxLabelLen < 0, l.MaxRequestBytes < 0, l.Burst < 0, l.PageSize < 0, l.MaxPageSize < 0,
		l.MaxWaitersPerTenant < 0, l.MaxStreamsPerTenant < 0:
		return bad("a count is negative")
	case l.MaxLease < distlock.MinLease:
		return bad("max lease %v is under the minimum lease %v", l.MaxLease, distlock.MinLease)
	case l.DefaultLease < distlock.MinLease || l.DefaultLease > l.MaxLease:
		return bad("default lease %v is outside %v..%v", l.DefaultLease, distlock.MinLease, l.MaxLease)
	case l.MaxWait < 0:
		return bad("max wait %v is negative", l.MaxWait)
	case l.PageSize > l.MaxPageSize:
		return bad("page size %d is over the max page size %d", l.PageSize, l.MaxPageSize)
	case l.MaxStreamLifetime < 0:
		return bad("max stream lifetime %v is negative", l.MaxStreamLifetime)
	case l.WatchInterval < 0:
		return bad("watch interval %v is negative", l.WatchInterval)
	case math.IsNaN(l.RatePerTenant) || l.RatePerTenant < 0:
		return bad("rate per tenant %v is not a positive number", l.RatePerTenant)
	}
	return l, nil
}

// rateLimit is the limiter rate of l.
func (l Limits) rateLimit() rate.Limit {
	if math.IsInf(l.RatePerTenant, 1) {
		return rate.Inf
	}
	return rate.Limit(l.RatePerTenant)
}
