package embedetcd

import (
	"log/slog"
	"runtime"
	"sync/atomic"

	"go.uber.org/zap/zapcore"
)

// FatalError is an error etcd logged as fatal: one it does not go on after.
type FatalError struct {
	Message string      // etcd's log message, such as "failed to open WAL"
	Attrs   []slog.Attr // the record's fields; etcd's error is "error"
	err     string      // the text of the record's error fields
}

// Error returns etcd's message and error.
func (e *FatalError) Error() string {
	if e.err == "" {
		return "embedetcd: etcd failed: " + e.Message
	}
	return "embedetcd: etcd failed: " + e.Message + ": " + e.err
}

// fatalHook is the zapcore.CheckWriteHook of etcd's fatal records, run
// once the record was logged, in place of zap's os.Exit(1): it hands the
// error to the function given to OnFatal, else to Err, and ends the
// goroutine that logged it, as zap requires of a fatal hook (the code
// after a Fatal call must not run).
type fatalHook struct {
	fn       atomic.Pointer[func(*FatalError)]
	errc     chan error // Err: the first error of the store, fatal or not
	happened atomic.Bool
}

var _ zapcore.CheckWriteHook = (*fatalHook)(nil)

func newFatalHook() *fatalHook { return &fatalHook{errc: make(chan error, 1)} }

// OnWrite is called after a fatal record was written; it does not return.
func (h *fatalHook) OnWrite(ce *zapcore.CheckedEntry, fields []zapcore.Field) {
	h.happened.Store(true)
	err := &FatalError{Message: ce.Message, Attrs: attrsOf(fields), err: errorText(fields)}
	if fn := h.fn.Load(); fn != nil {
		(*fn)(err)
	} else {
		h.report(err)
	}
	runtime.Goexit()
}

// report puts err on the Err channel unless an error is there already.
func (h *fatalHook) report(err error) {
	select {
	case h.errc <- err:
	default:
	}
}
