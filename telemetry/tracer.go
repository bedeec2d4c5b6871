package telemetry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/distlock/distlock/observe"
)

// TracerName is the instrumentation name of the spans Tracer creates.
const TracerName = "github.com/distlock/distlock/telemetry"

// Tracer is an observe.Observer that records OpenTelemetry spans. Create it
// with NewTracer.
//
// Each acquisition is a span "distlock.acquire", a child of the caller's
// span, from the first attempt until the lock is granted or the wait ends:
// a trace shows where a request waited for a lock. It carries
// distlock.key, distlock.group, distlock.backend, distlock.critical and, at
// its end, distlock.result, distlock.wait_seconds and distlock.fence; its
// status is Error unless the lock was acquired.
//
// A renewal failure, release or loss happens later, often after the caller's
// span ended, so each is a short span of its own ("distlock.renew",
// "distlock.release", "distlock.lost") holding one event with the details.
// It is a sibling of the acquire span (a child of the span that was current
// when the lock was taken), so that a request that locks and releases shows
// both in one trace, and it links to the acquire span. A request a policy
// refuses gets an acquire span too, ended at once with result degraded or
// error.
type Tracer struct {
	tracer trace.Tracer
}

var _ observe.Observer = (*Tracer)(nil)

// NewTracer returns an observer that creates spans with tp.
func NewTracer(tp trace.TracerProvider) *Tracer {
	return &Tracer{tracer: tp.Tracer(TracerName)}
}

// acquireSpan is what AcquireStarted leaves in the context for later events.
type acquireSpan struct {
	span   trace.Span
	parent trace.SpanContext
}

type acquireSpanKey struct{}

// AcquireStarted starts the acquire span and returns a context holding it.
func (t *Tracer) AcquireStarted(ctx context.Context, e observe.Event) context.Context {
	parent := trace.SpanContextFromContext(ctx)
	ctx, span := t.tracer.Start(ctx, "distlock.acquire", trace.WithAttributes(
		attribute.String("distlock.key", e.Key),
		attribute.String("distlock.group", groupOf(e)),
		attribute.String("distlock.backend", e.Backend),
		attribute.Bool("distlock.critical", e.Critical),
	))
	return context.WithValue(ctx, acquireSpanKey{}, &acquireSpan{span: span, parent: parent})
}

// Observe ends the acquire span or records a later event.
func (t *Tracer) Observe(ctx context.Context, e observe.Event) {
	as, _ := ctx.Value(acquireSpanKey{}).(*acquireSpan)
	if result, ok := acquireResult(e); ok {
		if as == nil {
			return // not started by this tracer
		}
		as.span.SetAttributes(attribute.String("distlock.result", result), attribute.Float64("distlock.wait_seconds", e.Wait.Seconds()))
		if e.Kind == observe.Acquired {
			as.span.SetAttributes(attribute.Int64("distlock.fence", int64(e.Fence)))
		} else {
			as.span.RecordError(e.Err)
			as.span.SetStatus(codes.Error, result)
		}
		as.span.End()
		return
	}
	var name, event string
	switch e.Kind {
	case observe.RenewFailed:
		name, event = "distlock.renew", "distlock.renew_failed"
	case observe.Released:
		name, event = "distlock.release", "distlock.released"
	case observe.Lost:
		name, event = "distlock.lost", "distlock.lost"
	default:
		return
	}
	var opts []trace.SpanStartOption
	if as != nil {
		ctx = trace.ContextWithSpanContext(ctx, as.parent)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: as.span.SpanContext()}))
	}
	_, span := t.tracer.Start(ctx, name, opts...)
	attrs := []attribute.KeyValue{
		attribute.String("distlock.key", e.Key),
		attribute.String("distlock.group", groupOf(e)),
		attribute.String("distlock.backend", e.Backend),
		attribute.Int64("distlock.fence", int64(e.Fence)),
	}
	if e.Kind != observe.RenewFailed {
		attrs = append(attrs, attribute.String("distlock.reason", e.Reason), attribute.Float64("distlock.hold_seconds", e.Hold.Seconds()))
	}
	span.AddEvent(event, trace.WithAttributes(attrs...))
	if e.Err != nil {
		span.RecordError(e.Err)
	}
	if e.Kind != observe.Released || e.Err != nil {
		span.SetStatus(codes.Error, event)
	}
	span.End()
}
