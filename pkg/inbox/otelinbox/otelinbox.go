// Package otelinbox hands the headers of each message pkg/inbox consumes to an
// OpenTelemetry propagator, so the handler's context carries the producer's span
// context as OpenTelemetry sees it (trace.SpanContextFromContext, a remote parent for
// the consumer's span) and whatever else the propagator reads (baggage).
//
//	c, err := inbox.New(cfg, db, handle, log, otelinbox.WithPropagator(otel.GetTextMapPropagator()))
//
//	func handle(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
//		ctx, span := tracer.Start(ctx, "inventory.reserve", trace.WithSpanKind(trace.SpanKindConsumer))
//		defer span.End()
//		...
//	}
//
// It is a package of its own so that pkg/inbox does not make every consumer depend on
// OpenTelemetry: pkg/inbox reads the W3C headers itself (inbox.SpanContextFromContext)
// with the standard library alone, and only a program that imports this package
// builds OpenTelemetry in.
package otelinbox

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/propagation"

	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

// WithPropagator is an inbox option that extracts each message's context from its
// headers with p; nil means propagation.TraceContext{}, the W3C headers the relay
// publishes. A program that set a global propagator passes otel.GetTextMapPropagator()
// (for example a composite of TraceContext and Baggage).
func WithPropagator(p propagation.TextMapPropagator) inbox.Option {
	return inbox.WithContextFromHeaders(func(ctx context.Context, h amqp.Table) context.Context {
		return Extract(ctx, p, h)
	})
}

// Extract returns ctx with what p reads from the AMQP headers h (nil p:
// propagation.TraceContext{}).
func Extract(ctx context.Context, p propagation.TextMapPropagator, h amqp.Table) context.Context {
	if p == nil {
		p = propagation.TraceContext{}
	}
	return p.Extract(ctx, Carrier(h))
}

// Carrier adapts AMQP headers to propagation.TextMapCarrier: text values (strings, or
// bytes as some clients send them) are read, others are not text and read as "".
type Carrier amqp.Table

var _ propagation.TextMapCarrier = Carrier(nil)

// Get returns the text value of key.
func (c Carrier) Get(key string) string { return inbox.HeaderString(amqp.Table(c), key) }

// Set sets key (for injecting into headers of a message to publish).
func (c Carrier) Set(key, value string) { c[key] = value }

// Keys lists the header names.
func (c Carrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
