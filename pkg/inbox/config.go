package inbox

import (
	"errors"
	"fmt"
	"time"
)

// Config configures a Consumer, its Retrier and its Purger. Zero values take the
// defaults listed on each field; call WithDefaults then Validate (New does both).
type Config struct {
	// URL is the AMQP URL of the broker. Required. It carries a password, so it never
	// appears in a log line or an error.
	URL string
	// Queue is the queue to consume from. Required. It must exist: topology belongs to
	// the deployment, not to the consumer.
	Queue string
	// ConsumerName is the logical consumer (for example "inventory-service"). Required.
	// Rows are unique per (consumer, message_id), so two services sharing one table each
	// handle every message once.
	ConsumerName string
	// ConsumerTag is the AMQP consumer tag. Default: chosen by the server.
	ConsumerTag string
	// Preset is the inbox table's layout (docs/inbox.md): "inbox" (the default,
	// schema/consumer_message.sql), "consumer-message" (the design documents'
	// consumer_message: message_id unique on its own, no consumer column) or
	// "msg-dedup" (t_msg_dedup: handled message ids only).
	Preset string
	// Table is the inbox table. Default: the preset's (consumer_message, t_msg_dedup).
	Table string
	// Columns overrides the preset's column names field by field; "-" says the
	// table has no such column.
	Columns Columns
	// LogTable is msg-dedup's optional processing log (t_message_log): one row per
	// message, PROCESSING while retried, then SUCCESS or FAILED with the error.
	LogTable string
	// LogColumns overrides the log's column names field by field.
	LogColumns LogColumns
	// MessageIDLen is the width of the message id column. Default: the preset's
	// (128, or 64 for the design documents' tables). A longer id is recorded FAILED
	// under a derived id (state tables) or refused (dedup tables).
	MessageIDLen int

	// Workers is the number of deliveries handled at once. Default 8.
	Workers int
	// Prefetch is the AMQP prefetch count (basic.qos). Default 2 * Workers, so a worker
	// that finishes finds the next delivery already on the client.
	Prefetch int
	// ReconnectDelay is the first wait before reconnecting to the broker; it doubles up
	// to ReconnectMaxDelay. Defaults 500ms and 30s.
	ReconnectDelay    time.Duration
	ReconnectMaxDelay time.Duration
	// RequeueDelay is how long a worker waits before requeueing a delivery whose
	// database work failed (database down), so the message does not spin. Default 1s.
	RequeueDelay time.Duration
	// ShutdownTimeout bounds how long Run waits for in-flight handlers after its context
	// is cancelled; past it their transactions are cancelled (rolled back, not ACKed,
	// redelivered later). Default 30s.
	ShutdownTimeout time.Duration

	// MaxRetries is how many times a failed message is retried before it is FAILED, so a
	// message is handled at most 1+MaxRetries times. Default 5.
	MaxRetries int
	// RetryBackoff is the delay before the first retry; it doubles per retry up to
	// RetryMaxBackoff. Defaults 1s and 5m.
	RetryBackoff    time.Duration
	RetryMaxBackoff time.Duration
	// RetryInterval is how often the retry task looks for due rows. Default 1s.
	RetryInterval time.Duration
	// RetryBatch is how many rows the retry task claims per transaction. Default 100.
	RetryBatch int
	// RetryStuckTimeout is how long a row may stay RETRYING (republished but not yet
	// consumed) before the retry task takes it back. Keep it above the longest queue
	// backlog you expect. Default 5m.
	RetryStuckTimeout time.Duration
	// RetryToQueue republishes through the default exchange straight to Queue instead of
	// to the message's original exchange and routing key. The original route also reaches
	// every other queue bound to it (their inboxes absorb the copy, but it is work).
	RetryToQueue bool
	// DisableRetryTask stops Consumer.Run from running the retry task, for deployments
	// that run a Retrier elsewhere. Without any retry task PENDING_RETRY rows stay put.
	DisableRetryTask bool

	// Retention is how long SUCCESS rows are kept. A redelivery older than this is
	// handled again, so keep it well above any redelivery horizon. Default 7 days.
	Retention time.Duration
	// RetentionInterval is how often old SUCCESS rows are purged. Default 1h.
	RetentionInterval time.Duration
	// RetentionBatch is how many rows one DELETE removes. Default 1000.
	RetentionBatch int
	// DisableRetention stops Consumer.Run from purging.
	DisableRetention bool

	// DedupTTL is how long a Redis duplicate marker lives. Markers only save database
	// reads; an expired one costs a lookup, never a message. Default 24h.
	DedupTTL time.Duration
	// DedupTimeout bounds each Redis call so a slow Redis only costs that much. Default
	// 100ms.
	DedupTimeout time.Duration
	// DedupKeyPrefix prefixes Redis keys. Default "inbox:".
	DedupKeyPrefix string
}

// MaxMessageIDLen is the width of schema/consumer_message.sql's message_id. A longer
// id cannot be stored, so such a message is recorded FAILED under a derived id.
const MaxMessageIDLen = 128

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if p, ok := presets[c.Preset]; ok || c.Preset == "" {
		if c.Preset == "" {
			p = presets["inbox"]
		}
		setDefault(&c.Table, p.Table)
	}
	setDefault(&c.Workers, 8)
	setDefault(&c.Prefetch, 2*c.Workers)
	setDefault(&c.ReconnectDelay, 500*time.Millisecond)
	setDefault(&c.ReconnectMaxDelay, 30*time.Second)
	setDefault(&c.RequeueDelay, time.Second)
	setDefault(&c.ShutdownTimeout, 30*time.Second)
	setDefault(&c.MaxRetries, 5)
	setDefault(&c.RetryBackoff, time.Second)
	setDefault(&c.RetryMaxBackoff, 5*time.Minute)
	setDefault(&c.RetryInterval, time.Second)
	setDefault(&c.RetryBatch, 100)
	setDefault(&c.RetryStuckTimeout, 5*time.Minute)
	setDefault(&c.Retention, 7*24*time.Hour)
	setDefault(&c.RetentionInterval, time.Hour)
	setDefault(&c.RetentionBatch, 1000)
	setDefault(&c.DedupTTL, 24*time.Hour)
	setDefault(&c.DedupTimeout, 100*time.Millisecond)
	setDefault(&c.DedupKeyPrefix, "inbox:")
	return c
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Validate reports every invalid field, each error naming it.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("inbox config: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	if c.URL == "" {
		bad("URL", "required")
	}
	if c.Queue == "" {
		bad("Queue", "required")
	}
	if c.ConsumerName == "" {
		bad("ConsumerName", "required")
	} else if len(c.ConsumerName) > 128 {
		bad("ConsumerName", "longer than 128 bytes")
	}
	if m, err := c.resolve(); err != nil {
		errs = append(errs, err)
	} else if err := m.validate(); err != nil {
		errs = append(errs, err)
	}
	positive := func(field string, v int) {
		if v <= 0 {
			bad(field, "must be positive, got %d", v)
		}
	}
	positive("Workers", c.Workers)
	positive("Prefetch", c.Prefetch)
	positive("MaxRetries", c.MaxRetries)
	positive("RetryBatch", c.RetryBatch)
	positive("RetentionBatch", c.RetentionBatch)
	durations := []struct {
		name string
		v    time.Duration
	}{
		{"ReconnectDelay", c.ReconnectDelay}, {"ReconnectMaxDelay", c.ReconnectMaxDelay},
		{"RequeueDelay", c.RequeueDelay}, {"ShutdownTimeout", c.ShutdownTimeout},
		{"RetryBackoff", c.RetryBackoff}, {"RetryMaxBackoff", c.RetryMaxBackoff},
		{"RetryInterval", c.RetryInterval}, {"RetryStuckTimeout", c.RetryStuckTimeout},
		{"Retention", c.Retention}, {"RetentionInterval", c.RetentionInterval},
		{"DedupTTL", c.DedupTTL}, {"DedupTimeout", c.DedupTimeout},
	}
	for _, d := range durations {
		if d.v <= 0 {
			bad(d.name, "must be positive, got %s", d.v)
		}
	}
	if c.Prefetch > 0 && c.Workers > 0 && c.Prefetch < c.Workers {
		bad("Prefetch", "%d is below Workers (%d): some workers would idle", c.Prefetch, c.Workers)
	}
	if c.RetryMaxBackoff > 0 && c.RetryMaxBackoff < c.RetryBackoff {
		bad("RetryMaxBackoff", "%s is below RetryBackoff (%s)", c.RetryMaxBackoff, c.RetryBackoff)
	}
	if c.ReconnectMaxDelay > 0 && c.ReconnectMaxDelay < c.ReconnectDelay {
		bad("ReconnectMaxDelay", "%s is below ReconnectDelay (%s)", c.ReconnectMaxDelay, c.ReconnectDelay)
	}
	return errors.Join(errs...)
}

// mapping is the resolved table layout of a valid Config.
func (c Config) mapping() mapping {
	m, _ := c.resolve()
	return m
}
