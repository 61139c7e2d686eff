package otelinbox

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestExtractWithTraceContextPropagator(t *testing.T) {
	p := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	h := amqp.Table{"traceparent": []byte(traceparent), "tracestate": "rojo=00f067aa0ba902b7", "baggage": "tenant=acme"}
	ctx := Extract(context.Background(), p, h)
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() || !sc.IsSampled() {
		t.Fatalf("span context %+v: want a valid, remote, sampled parent", sc)
	}
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" {
		t.Fatalf("trace %s span %s", sc.TraceID(), sc.SpanID())
	}
	if sc.TraceState().Get("rojo") != "00f067aa0ba902b7" {
		t.Errorf("tracestate %q", sc.TraceState().String())
	}
	if v := baggage.FromContext(ctx).Member("tenant").Value(); v != "acme" {
		t.Errorf("baggage tenant %q", v)
	}
	// Injecting into a carrier writes the same context back.
	out := Carrier(amqp.Table{})
	p.Inject(ctx, out)
	if out["traceparent"] != traceparent {
		t.Errorf("injected %v", out)
	}
}

// nil reads the W3C headers; the global propagator is one a program passes.
func TestExtractDefaultAndGlobalPropagator(t *testing.T) {
	h := amqp.Table{"traceparent": traceparent}
	if sc := trace.SpanContextFromContext(Extract(context.Background(), nil, h)); sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("nil propagator: trace %s", sc.TraceID())
	}
	prev := otel.GetTextMapPropagator()
	t.Cleanup(func() { otel.SetTextMapPropagator(prev) })
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}))
	if sc := trace.SpanContextFromContext(Extract(context.Background(), otel.GetTextMapPropagator(), h)); !sc.IsValid() {
		t.Fatalf("global propagator: %+v", sc)
	}
	if WithPropagator(nil) == nil {
		t.Fatal("no option")
	}
}
