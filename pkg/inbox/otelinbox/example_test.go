package otelinbox_test

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/binlog-relay/binlog-relay/pkg/inbox/otelinbox"
)

// The W3C headers the relay publishes (from a trace column of the outbox
// row) become the remote parent of the consumer's span.
func ExampleExtract() {
	headers := amqp.Table{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	ctx := otelinbox.Extract(context.Background(), nil, headers)
	sc := trace.SpanContextFromContext(ctx)
	fmt.Println(sc.TraceID(), sc.SpanID(), sc.IsRemote(), sc.IsSampled())
	// Output: 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7 true true
}
