package policy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/observe"
)

// Policy applies a Config to every request of a client. It is both the
// client's distlock.Policy and an observe.Observer that measures the store's
// latency, so a client needs both options:
//
//	p, err := policy.New(cfg)
//	client := distlock.New(backend, distlock.WithPolicy(p), distlock.WithObserver(p))
//
// (combine p with other observers through observe.Join). A Policy
// measures one store: give each client its own.
type Policy struct {
	cfg      Config
	prefixes []prefix // longest first
	groups   map[string]*group
	window   *window
	hooks    []func(group string, active bool, p99 time.Duration)

	degradable []*group
	lastEval   atomic.Int64 // unix nanoseconds of the last evaluation
	evalMu     sync.Mutex
}

var (
	_ distlock.Policy  = (*Policy)(nil)
	_ observe.Observer = (*Policy)(nil)
)

type prefix struct {
	prefix string
	group  *group
}

// group is a configured group and its degradation state.
type group struct {
	Group
	degraded   atomic.Bool
	p99        atomic.Int64 // the p99 when degradation began
	belowSince time.Time    // under evalMu: since when the p99 is under LeaveP99
}

// evalEvery is how often the window is checked against the thresholds.
const evalEvery = 50 * time.Millisecond

// Option configures a Policy.
type Option func(*Policy)

// OnDegradation calls f whenever a group begins (active) or ends degradation,
// with the store p99 that decided it. f runs synchronously, in order of the
// changes, on the goroutine that observed the change, and must not block. It may be given several
// times; telemetry.Metrics.Degradation and telemetry.Logger.Degradation fit.
// The default is none.
func OnDegradation(f func(group string, active bool, p99 time.Duration)) Option {
	return func(p *Policy) { p.hooks = append(p.hooks, f) }
}

// New checks cfg and returns a Policy for it. Errors name the group and the
// field at fault.
func New(cfg Config, opts ...Option) (*Policy, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Policy{cfg: cfg, groups: map[string]*group{}, window: newWindow(cfg.Window.Length)}
	for _, g := range append([]Group{cfg.Default}, cfg.Groups...) {
		gg := &group{Group: g}
		p.groups[g.Name] = gg
		for _, pre := range g.Prefixes {
			p.prefixes = append(p.prefixes, prefix{pre, gg})
		}
		if g.Degrade.EnterP99 > 0 {
			p.degradable = append(p.degradable, gg)
		}
	}
	slices.SortFunc(p.prefixes, func(a, b prefix) int { return len(b.prefix) - len(a.prefix) })
	for _, o := range opts {
		o(p)
	}
	return p, nil
}

// Group returns the name of the group that governs key: the group with the
// longest prefix of key, else the default group.
func (p *Policy) Group(key string) string { return p.lookup(key).Name }

func (p *Policy) lookup(key string) *group {
	for _, pre := range p.prefixes {
		if strings.HasPrefix(key, pre.prefix) {
			return pre.group
		}
	}
	return p.groups[p.cfg.Default.Name]
}

// MaxHold returns the max_hold of the group that governs key: zero for
// none. A lock service that lets its clients renew by hand enforces it with
// this, as the watchdog does for a Lock.
func (p *Policy) MaxHold(key string) time.Duration { return p.lookup(key).MaxHold }

// Lease returns the lease of the group that governs key for requests that
// name none: zero if the group sets none. A lock service that fills in a
// lease before the policy sees the request takes it from here.
func (p *Policy) Lease(key string) time.Duration { return p.lookup(key).Lease }

// Degraded reports whether group fails its requests fast right now.
func (p *Policy) Degraded(group string) bool {
	g := p.groups[group]
	return g != nil && g.degraded.Load()
}

// Apply sets the request's group, fills the group's defaults where the caller
// gave none, and refuses with distlock.ErrInvalidOption a value over the
// group's limits, naming the limit. Values are never clamped: a caller that
// asked for more than the group allows learns it at once. A non-critical
// request of a degraded group is refused with distlock.ErrDegraded.
func (p *Policy) Apply(_ context.Context, r *distlock.Request) error {
	g := p.lookup(r.Key)
	r.Group, r.Critical = g.Name, g.Critical
	over := func(what string, v time.Duration, field string, limit time.Duration) error {
		return fmt.Errorf("%w: %s %v exceeds %s %v of group %q", distlock.ErrInvalidOption, what, v, field, limit, g.Name)
	}
	if !r.ExplicitLease && g.Lease > 0 {
		r.Lease = g.Lease
	}
	if g.MaxLease > 0 && r.Lease > g.MaxLease {
		return over("lease", r.Lease, "max_lease", g.MaxLease)
	}
	if g.MaxWait > 0 {
		switch {
		case r.Wait == distlock.WaitUntilContextDone:
			r.Wait = g.MaxWait
		case r.Wait > g.MaxWait:
			return over("wait", r.Wait, "max_wait", g.MaxWait)
		}
	}
	if g.MaxHold > 0 {
		switch {
		case r.MaxHold == 0:
			r.MaxHold = g.MaxHold
		case r.MaxHold > g.MaxHold:
			return over("max hold", r.MaxHold, "max_hold", g.MaxHold)
		}
	}
	if len(p.degradable) > 0 {
		p.evaluate(time.Now()) // recovery must not wait for traffic that degradation holds back
	}
	if !g.Critical && g.degraded.Load() {
		return fmt.Errorf("%w: group %q: store p99 %v reached %v", distlock.ErrDegraded, g.Name, time.Duration(g.p99.Load()), g.Degrade.EnterP99)
	}
	return nil
}

// AcquireStarted returns ctx unchanged.
func (p *Policy) AcquireStarted(ctx context.Context, _ observe.Event) context.Context { return ctx }

// Observe adds the latency of every store request to the window.
func (p *Policy) Observe(_ context.Context, e observe.Event) {
	if e.Kind != observe.StoreCall || len(p.degradable) == 0 {
		return
	}
	now := time.Now()
	p.window.add(now, e.Latency)
	p.evaluate(now)
}

// evaluate checks the window against each group's thresholds, at most once
// per evalEvery, and reports changes to the hooks.
func (p *Policy) evaluate(now time.Time) {
	last := p.lastEval.Load()
	if now.UnixNano()-last < int64(evalEvery) || !p.lastEval.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	p99, n := p.window.quantile(now, 0.99)
	p.evalMu.Lock()
	defer p.evalMu.Unlock() // hooks run under it, so that they see changes in order
	for _, g := range p.degradable {
		if g.step(now, p99, n >= p.cfg.Window.MinSamples) {
			for _, h := range p.hooks {
				h(g.Name, g.degraded.Load(), p99)
			}
		}
	}
}

// step moves g's degradation state given the window's p99; enough says the
// window holds enough requests to begin degradation. It reports a change.
func (g *group) step(now time.Time, p99 time.Duration, enough bool) bool {
	d := g.Degrade
	if !g.degraded.Load() {
		if !enough || p99 < d.EnterP99 {
			return false
		}
		g.p99.Store(int64(p99))
		g.belowSince = time.Time{}
		g.degraded.Store(true)
		return true
	}
	if p99 >= d.LeaveP99 {
		g.belowSince = time.Time{}
		return false
	}
	if g.belowSince.IsZero() {
		g.belowSince = now
	}
	if now.Sub(g.belowSince) < d.MinRecovery {
		return false
	}
	g.degraded.Store(false)
	return true
}
