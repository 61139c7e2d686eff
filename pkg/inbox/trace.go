package inbox

import (
	"context"

	"github.com/binlog-relay/binlog-relay/internal/tracecontext"
)

// SpanContext is the W3C trace context a message carries in its traceparent
// and tracestate headers: the trace of the transaction that wrote the
// outbox row, and the producer's span as the consumer's parent.
type SpanContext struct {
	// TraceID is the trace-id, 16 bytes, never all zero.
	TraceID [16]byte
	// SpanID is the parent-id: the producer's span, 8 bytes, never all zero.
	SpanID [8]byte
	// Flags are the trace-flags; bit 0 is sampled.
	Flags byte
	// TraceState is the tracestate header when valid, "" otherwise (a
	// traceparent stands without it).
	TraceState string
}

// Sampled reports the sampled trace flag.
func (s SpanContext) Sampled() bool { return s.Flags&1 == 1 }

// TraceIDString is the trace-id as 32 lower-case hex digits.
func (s SpanContext) TraceIDString() string { return tracecontext.TraceID(s.TraceID).String() }

// SpanIDString is the parent-id as 16 lower-case hex digits.
func (s SpanContext) SpanIDString() string { return tracecontext.SpanID(s.SpanID).String() }

// Traceparent renders the version 00 traceparent header value.
func (s SpanContext) Traceparent() string { return s.internal().Traceparent() }

func (s SpanContext) internal() tracecontext.SpanContext {
	return tracecontext.SpanContext{TraceID: s.TraceID, SpanID: s.SpanID, Flags: s.Flags, TraceState: s.TraceState}
}

func spanContextOf(sc tracecontext.SpanContext) SpanContext {
	return SpanContext{TraceID: sc.TraceID, SpanID: sc.SpanID, Flags: sc.Flags, TraceState: sc.TraceState}
}

// SpanContextFromContext returns the trace context the inbox put into a
// handler's ctx; ok is false when the message had no valid traceparent.
func SpanContextFromContext(ctx context.Context) (SpanContext, bool) {
	sc, ok := tracecontext.FromContext(ctx)
	if !ok {
		return SpanContext{}, false
	}
	return spanContextOf(sc), true
}
