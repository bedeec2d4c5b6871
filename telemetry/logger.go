package telemetry

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/distlock/distlock"
	"github.com/distlock/distlock/observe"
)

// Logger is an observe.Observer that writes one log/slog record per
// acquisition, release, loss and failed renewal. Create it with NewLogger.
//
// Levels:
//
//	lock acquired, lock released                 the success level (Debug unless WithSuccessLevel)
//	lock not acquired (contention or degraded)   Info
//	lock released after its lease expired        Warn
//	lock lost, lock renewal failed               Warn
//	lock acquire failed, refused as invalid,
//	release failed                               Error
//
// Records carry key, group, backend, owner and business_id (when set),
// token_id (a short hash, never the token), fence, wait, hold, reason and err.
type Logger struct {
	l       *slog.Logger
	success slog.Level
}

var _ observe.Observer = (*Logger)(nil)

// LoggerOption configures a Logger.
type LoggerOption func(*Logger)

// WithSuccessLevel sets the level of "lock acquired" and "lock released"
// records. The default is slog.LevelDebug: on a busy service these are the
// bulk of the records and rarely needed.
func WithSuccessLevel(level slog.Level) LoggerOption { return func(g *Logger) { g.success = level } }

// NewLogger returns an observer that logs to l.
func NewLogger(l *slog.Logger, opts ...LoggerOption) *Logger {
	g := &Logger{l: l, success: slog.LevelDebug}
	for _, o := range opts {
		o(g)
	}
	return g
}

// AcquireStarted returns ctx unchanged.
func (g *Logger) AcquireStarted(ctx context.Context, _ observe.Event) context.Context { return ctx }

// Observe logs e.
func (g *Logger) Observe(ctx context.Context, e observe.Event) {
	level, msg := g.classify(e)
	if msg == "" || !g.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("key", e.Key), slog.String("group", groupOf(e)), slog.String("backend", e.Backend))
	if e.Owner != "" {
		attrs = append(attrs, slog.String("owner", e.Owner))
	}
	if e.BusinessID != "" {
		attrs = append(attrs, slog.String("business_id", e.BusinessID))
	}
	if e.TokenID != "" {
		attrs = append(attrs, slog.String("token_id", e.TokenID))
	}
	if e.Fence != 0 {
		attrs = append(attrs, slog.Uint64("fence", e.Fence))
	}
	switch e.Kind {
	case observe.Acquired, observe.NotAcquired, observe.AcquireFailed:
		if result, _ := acquireResult(e); result != "" {
			attrs = append(attrs, slog.String("result", result))
		}
		attrs = append(attrs, slog.Duration("wait", e.Wait))
	case observe.Released, observe.Lost:
		attrs = append(attrs, slog.Duration("hold", e.Hold), slog.String("reason", e.Reason))
	case observe.ForceReleased, observe.ReleaseRequested:
		attrs = append(attrs, slog.String("reason", e.Reason))
	}
	if e.Err != nil {
		attrs = append(attrs, slog.Any("err", e.Err))
	}
	g.l.LogAttrs(ctx, level, msg, attrs...)
}

// classify returns the level and message of e, or "" for events not logged.
func (g *Logger) classify(e observe.Event) (slog.Level, string) {
	switch e.Kind {
	case observe.Acquired:
		return g.success, "lock acquired"
	case observe.NotAcquired:
		if result, _ := acquireResult(e); result == ResultError {
			return slog.LevelError, "lock refused"
		}
		return slog.LevelInfo, "lock not acquired"
	case observe.AcquireFailed:
		return slog.LevelError, "lock acquire failed"
	case observe.RenewFailed:
		return slog.LevelWarn, "lock renewal failed"
	case observe.Lost:
		return slog.LevelWarn, "lock lost"
	case observe.ForceReleased:
		return slog.LevelWarn, "lock force-released"
	case observe.ReleaseRequested:
		return slog.LevelInfo, "lock release requested"
	case observe.Released:
		switch {
		case e.Reason == observe.ReleaseExpired:
			return slog.LevelWarn, "lock released after its lease expired"
		case e.Err != nil && !errors.Is(e.Err, distlock.ErrNotHeld):
			return slog.LevelError, "lock release failed"
		}
		return g.success, "lock released"
	}
	return 0, ""
}

// Degradation logs a policy's degradation change of group at Warn when it
// begins and Info when it ends. Pass it to policy.OnDegradation.
func (g *Logger) Degradation(group string, active bool, p99 time.Duration) {
	if group == "" {
		group = DefaultGroup
	}
	if active {
		g.l.Warn("lock group degraded: non-critical locks fail fast", "group", group, "store_p99", p99)
		return
	}
	g.l.Info("lock group recovered", "group", group, "store_p99", p99)
}
