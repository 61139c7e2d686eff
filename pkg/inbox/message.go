package inbox

import (
	"context"
	"database/sql"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Message is what a Handler sees of a delivery.
type Message struct {
	// ID is the AMQP message-id: the relay sets it to the outbox row's message_id.
	ID          string
	Body        []byte
	ContentType string
	Exchange    string
	RoutingKey  string
	// Redelivered is the broker's flag: an earlier delivery was not ACKed.
	Redelivered bool
	// RetryCount is how many times the retry task has republished this message; 0 on
	// the first attempt.
	RetryCount int
	// Headers are the delivery's AMQP headers. A message republished by the retry task
	// carries the original's (from the table's headers column) plus
	// x-inbox-retry-count. Read-only: the handler must not change the table.
	Headers amqp.Table
}

// Handler does the business work for one message inside tx, the transaction that also
// commits the inbox row. ctx carries the message's W3C trace context when it has a
// valid traceparent header (SpanContextFromContext), and whatever a
// WithContextFromHeaders option adds (an OpenTelemetry span context, with otelinbox). It must not commit or roll back tx. Returning nil commits;
// returning an error rolls the business work back and schedules a retry, or records
// the message FAILED at once if the error wraps ErrMalformed (see Malformed).
type Handler func(ctx context.Context, tx *sql.Tx, m Message) error

// Outcome is what the inbox did with a delivery. Every outcome is followed by an ACK.
type Outcome int

const (
	// Processed: the handler ran and its work committed with a SUCCESS row.
	Processed Outcome = iota + 1
	// Duplicate: the message was already SUCCESS, FAILED or scheduled for retry; no work.
	Duplicate
	// RetryScheduled: the handler failed; the row is PENDING_RETRY.
	RetryScheduled
	// Failed: the row is FAILED (max retries, malformed, no message id).
	Failed
)

// String names the outcome as the inbox logs it.
func (o Outcome) String() string {
	switch o {
	case Processed:
		return "processed"
	case Duplicate:
		return "duplicate"
	case RetryScheduled:
		return "retry_scheduled"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Row statuses of consumer_message.
const (
	StatusSuccess      = "SUCCESS"
	StatusPendingRetry = "PENDING_RETRY"
	StatusRetrying     = "RETRYING"
	StatusFailed       = "FAILED"
)
