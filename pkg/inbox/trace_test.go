package inbox

import (
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TraceContext gives the inbox's own SpanContext: the W3C fields, rendered
// back to the same traceparent, with no type from outside this package.
func TestTraceContextFields(t *testing.T) {
	sc, ok := TraceContext(amqp.Table{"traceparent": testTraceparent, "tracestate": "rojo=1,congo=2"})
	if !ok {
		t.Fatal("a valid traceparent was not read")
	}
	if sc.TraceIDString() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanIDString() != "00f067aa0ba902b7" ||
		!sc.Sampled() || sc.TraceState != "rojo=1,congo=2" {
		t.Fatalf("fields %+v", sc)
	}
	if got := sc.Traceparent(); got != testTraceparent {
		t.Fatalf("Traceparent() = %q, want %q", got, testTraceparent)
	}
	for _, bad := range []amqp.Table{{}, {"traceparent": "00-bad"}, {"traceparent": 42},
		{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}} {
		if sc, ok := TraceContext(bad); ok {
			t.Errorf("TraceContext(%v) = %+v, want none", bad, sc)
		}
	}
}
