package embedetcd

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"

	"go.uber.org/zap/zapcore"
)

// slogCore is a zapcore.Core that hands etcd's records at or above a level
// to a slog.Logger, so the embedded store logs through the service's logger
// (in its format, on its stream) and says nothing below warn. It drops the
// warnings that do not apply to an embedded store (see benign).
type slogCore struct {
	l       *slog.Logger
	level   zapcore.Level
	attrs   []slog.Attr  // fields added by With
	closing *atomic.Bool // set once Close began; shared by the cores With makes
}

// benignMessages are etcd warnings about settings that the embedded store
// chose on purpose: one listener for gRPC and HTTP (a socket only the
// service's user reaches), and etcd's auth tokens (auth is off: the service
// authenticates).
var benignMessages = []string{
	"Running http and grpc server on single port",
	"simple token is not cryptographically signed",
}

// benignFailures are etcd records of requests that failed as the lock
// backend expects: a lease revoked or renewed after it expired (a lock that
// ran out of lease, a spare lease revoked at close); and of the storage
// version monitor when it runs before a new member has saved its term or
// configuration, which the next check finds (etcd-io/etcd#18978).
var benignFailures = []struct{ msg, err string }{
	{"failed to apply request", "lease not found"},
	{"Failed to detect schema version", "missing term information"},
	{"Failed to detect schema version", "missing confstate information"},
	{"failed to update storage version", "missing term information"},
	{"failed to update storage version", "missing confstate information"},
}

// closingErrors are what etcd's listeners and background requests say, as
// errors, when Close stops them.
var closingErrors = []string{
	"use of closed network connection",
	"the server has been stopped",
	"http: Server closed",
	"mux: listener closed",
	"mux: server closed",
	"request cancelled",
	"context canceled",
}

// benign reports whether a record says nothing an operator should read.
func (c *slogCore) benign(e zapcore.Entry, fields []zapcore.Field) bool {
	for _, m := range benignMessages {
		if strings.HasPrefix(e.Message, m) {
			return true
		}
	}
	errText := errorText(fields)
	if errText == "" {
		return false
	}
	for _, b := range benignFailures {
		if strings.HasPrefix(e.Message, b.msg) && strings.Contains(errText, b.err) {
			return true
		}
	}
	if c.closing == nil || !c.closing.Load() {
		return false
	}
	for _, s := range closingErrors {
		if strings.Contains(errText, s) {
			return true
		}
	}
	return false
}

// errorText returns the text of the error fields among fields, or "".
func errorText(fields []zapcore.Field) string {
	var texts []string
	for _, f := range fields {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType && err != nil {
			texts = append(texts, err.Error())
		}
	}
	return strings.Join(texts, "; ")
}

var _ zapcore.Core = (*slogCore)(nil)

// Enabled reports whether records of level l are forwarded.
func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level }

// With returns a core whose records carry fields too.
func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	cc := *c
	cc.attrs = append(append([]slog.Attr(nil), c.attrs...), attrsOf(fields)...)
	return &cc
}

// Check adds c to ce if the entry's level is forwarded.
func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

// Write logs the entry to the slog logger.
func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	if c.benign(e, fields) {
		return nil
	}
	attrs := make([]slog.Attr, 0, len(c.attrs)+len(fields)+1)
	attrs = append(attrs, slog.String("component", "etcd"))
	attrs = append(attrs, c.attrs...)
	attrs = append(attrs, attrsOf(fields)...)
	c.l.LogAttrs(context.Background(), slogLevel(e.Level), e.Message, attrs...)
	return nil
}

// Sync does nothing: slog handlers write as they go.
func (c *slogCore) Sync() error { return nil }

// attrsOf converts zap fields to slog attributes.
func attrsOf(fields []zapcore.Field) []slog.Attr {
	if len(fields) == 0 {
		return nil
	}
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	attrs := make([]slog.Attr, 0, len(enc.Fields))
	for k, v := range enc.Fields {
		if err, ok := v.(error); ok {
			v = err.Error()
		} else if s, ok := v.(fmt.Stringer); ok {
			v = s.String()
		}
		attrs = append(attrs, slog.Any(k, v))
	}
	return attrs
}

// slogLevel maps a zap level to the slog level of the same meaning; zap's
// levels above error (dpanic, panic, fatal) are logged as errors.
func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l < zapcore.InfoLevel:
		return slog.LevelDebug
	case l < zapcore.WarnLevel:
		return slog.LevelInfo
	case l < zapcore.ErrorLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}
