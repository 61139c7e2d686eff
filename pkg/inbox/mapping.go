package inbox

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/ident"
)

// Columns names the inbox table's columns, the way an outbox mapping names
// an outbox table's. An empty name means the table has no such column;
// which ones may be empty depends on the kind of table (Preset).
type Columns struct {
	ID               string `yaml:"id"`           // the row's primary key (state tables)
	Consumer         string `yaml:"consumer"`     // consumer name; empty: one consumer per table
	MessageID        string `yaml:"message_id"`   // the AMQP message id; unique (with Consumer, when set)
	Status           string `yaml:"status"`       // SUCCESS / PENDING_RETRY / RETRYING / FAILED
	Content          string `yaml:"content"`      // the body, republished by the retry task
	ContentType      string `yaml:"content_type"` // optional
	Headers          string `yaml:"headers"`      // optional: the delivery's AMQP headers, republished with retries
	Exchange         string `yaml:"exchange"`
	RoutingKey       string `yaml:"routing_key"`
	RetryCount       string `yaml:"retry_count"`
	MaxRetryCount    string `yaml:"max_retry_count"`
	NextRetryTime    string `yaml:"next_retry_time"`
	Error            string `yaml:"error"`
	FirstConsumeTime string `yaml:"first_consume_time"`
	LastConsumeTime  string `yaml:"last_consume_time"`
	SuccessTime      string `yaml:"success_time"`
	Version          string `yaml:"version"`
	CreatedAt        string `yaml:"created_at"` // dedup tables: when the message was handled
}

// LogColumns names the columns of a processing log (t_message_log): one
// row per message, PROCESSING while it is being retried, SUCCESS or FAILED.
type LogColumns struct {
	MessageID  string `yaml:"message_id"` // unique
	Topic      string `yaml:"topic"`      // the exchange
	Tag        string `yaml:"tag"`        // the routing key; optional
	Status     string `yaml:"status"`     // PROCESSING / SUCCESS / FAILED
	RetryCount string `yaml:"retry_count"`
	Error      string `yaml:"error"` // optional
	CreatedAt  string `yaml:"created_at"`
	UpdatedAt  string `yaml:"updated_at"` // optional
}

// Kinds of inbox table.
const (
	// KindState is a table that records each message's state and body, so
	// the retry task can republish a failed one (consumer_message).
	KindState = "state"
	// KindDedup is a table of handled message ids only (t_msg_dedup): a
	// failed handler leaves nothing behind and the delivery is requeued.
	KindDedup = "dedup"
)

// Preset is an inbox table layout the inbox takes as it is.
type Preset struct {
	Kind       string
	Table      string
	Columns    Columns
	LogTable   string
	LogColumns LogColumns
	// MessageIDLen is the message id column's width, for ids too long to
	// store.
	MessageIDLen int
}

// presets are the inbox tables the inbox takes as they are (Config.Preset;
// Config.Layout gives one with the config laid over it). Columns and
// tables are overridable field by field (Config.Columns, Config.Table).
var presets = map[string]Preset{
	// The project's own table (schema/consumer_message.sql): unique per
	// (consumer, message_id), so services may share it.
	"inbox": {Kind: KindState, Table: "consumer_message", MessageIDLen: 128, Columns: Columns{
		ID: "id", Consumer: "consumer", MessageID: "message_id", Status: "status", Content: "content",
		ContentType: "content_type", Headers: "headers", Exchange: "exchange", RoutingKey: "routing_key", RetryCount: "retry_count",
		MaxRetryCount: "max_retry_count", NextRetryTime: "next_retry_time", Error: "error_msg",
		FirstConsumeTime: "first_consume_time", LastConsumeTime: "last_consume_time",
		SuccessTime: "success_time", Version: "version"}},
	// The design documents' consumer_message: message_id unique on its own
	// (one consuming service per table), no consumer or content type column.
	"consumer-message": {Kind: KindState, Table: "consumer_message", MessageIDLen: 64, Columns: Columns{
		ID: "id", MessageID: "message_id", Status: "status", Content: "content",
		Exchange: "exchange", RoutingKey: "routing_key", RetryCount: "retry_count",
		MaxRetryCount: "max_retry_count", NextRetryTime: "next_retry_time", Error: "error_msg",
		FirstConsumeTime: "first_consume_time", LastConsumeTime: "last_consume_time",
		SuccessTime: "success_time", Version: "version"}},
	// The minimal dedup table t_msg_dedup (msg_id PRIMARY KEY, create_time).
	// Set LogTable to "t_message_log" for its processing log.
	"msg-dedup": {Kind: KindDedup, Table: "t_msg_dedup", MessageIDLen: 64,
		Columns: Columns{MessageID: "msg_id", CreatedAt: "create_time"},
		LogColumns: LogColumns{MessageID: "msg_id", Topic: "topic", Tag: "tag", Status: "status",
			RetryCount: "retry_count", Error: "error", CreatedAt: "create_time", UpdatedAt: "update_time"}},
}

// PresetNames lists the presets' names (Config.Preset), sorted.
func PresetNames() []string {
	var names []string
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// mapping is a Config's table layout: the preset with the config's fields
// laid over it.
type mapping struct {
	Preset
	name string
}

// resolve lays cfg's table, columns and log over its preset.
func (c Config) resolve() (mapping, error) {
	name := c.Preset
	if name == "" {
		name = "inbox"
	}
	p, ok := presets[name]
	if !ok {
		return mapping{}, fmt.Errorf("inbox config: Preset: unknown preset %q (known: %v)", c.Preset, PresetNames())
	}
	m := mapping{Preset: p, name: name}
	if c.Table != "" {
		m.Table = c.Table
	}
	if c.LogTable != "" {
		m.LogTable = c.LogTable
	}
	if c.MessageIDLen > 0 {
		m.MessageIDLen = c.MessageIDLen
	}
	overlay(&m.Columns, c.Columns)
	overlay(&m.LogColumns, c.LogColumns)
	return m, nil
}

// Layout is the table layout c describes: its preset with Table, Columns,
// LogTable, LogColumns and MessageIDLen laid over it, validated. It needs
// none of the connection fields, so a tool that reads an inbox table
// (binlog-relay reconcile) reads it as the inbox writes it.
func (c Config) Layout() (Preset, error) {
	m, err := c.resolve()
	if err != nil {
		return Preset{}, err
	}
	if err := m.validate(); err != nil {
		return Preset{}, err
	}
	return m.Preset, nil
}

// overlay copies the non-empty string fields of src over dst; "-" clears
// one (the table has no such column).
func overlay[T any](dst *T, src T) {
	forEachField(dst, func(name string, d *string) {
		forEachField(&src, func(n string, s *string) {
			if n == name && *s != "" {
				*d = *s
				if *s == "-" {
					*d = ""
				}
			}
		})
	})
}

// validate reports every problem of the mapping, each naming the config
// field (Columns.Status, LogColumns.Topic), as outbox mappings do.
func (m mapping) validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("inbox config: %s: %s", field, fmt.Sprintf(format, args...)))
	}
	ident := func(field, v string) {
		if v != "" {
			if err := ident.Check(field, v); err != nil {
				errs = append(errs, fmt.Errorf("inbox config: %w", err))
			}
		}
	}
	ident("Table", m.Table)
	if m.Table == "" {
		bad("Table", "required")
	}
	forEachField(&m.Columns, func(name string, v *string) { ident("Columns."+name, *v) })
	var required []string
	switch m.Kind {
	case KindState:
		required = []string{"ID", "MessageID", "Status", "Content", "Exchange", "RoutingKey", "RetryCount",
			"MaxRetryCount", "NextRetryTime", "Error", "FirstConsumeTime", "LastConsumeTime", "SuccessTime", "Version"}
		if m.LogTable != "" {
			bad("LogTable", "only a dedup table (preset msg-dedup) takes a processing log; %s records each message's state itself", m.Table)
		}
	case KindDedup:
		required = []string{"MessageID", "CreatedAt"}
	}
	forEachField(&m.Columns, func(name string, v *string) {
		for _, r := range required {
			if r == name && *v == "" {
				bad("Columns."+name, "required for a %s table (preset %s)", m.Kind, m.name)
			}
		}
	})
	if m.LogTable != "" {
		ident("LogTable", m.LogTable)
		forEachField(&m.LogColumns, func(name string, v *string) {
			ident("LogColumns."+name, *v)
			switch name {
			case "MessageID", "Topic", "Status", "RetryCount", "CreatedAt":
				if *v == "" {
					bad("LogColumns."+name, "required with LogTable")
				}
			}
		})
	}
	if m.MessageIDLen <= 0 {
		bad("MessageIDLen", "must be positive")
	}
	return errors.Join(errs...)
}

// forEachField calls f for each string field of a Columns or LogColumns,
// by its Go name.
func forEachField[T any](v *T, f func(name string, field *string)) {
	switch c := any(v).(type) {
	case *Columns:
		for _, p := range []struct {
			n string
			s *string
		}{{"ID", &c.ID}, {"Consumer", &c.Consumer}, {"MessageID", &c.MessageID}, {"Status", &c.Status},
			{"Content", &c.Content}, {"ContentType", &c.ContentType}, {"Headers", &c.Headers}, {"Exchange", &c.Exchange},
			{"RoutingKey", &c.RoutingKey}, {"RetryCount", &c.RetryCount}, {"MaxRetryCount", &c.MaxRetryCount},
			{"NextRetryTime", &c.NextRetryTime}, {"Error", &c.Error}, {"FirstConsumeTime", &c.FirstConsumeTime},
			{"LastConsumeTime", &c.LastConsumeTime}, {"SuccessTime", &c.SuccessTime}, {"Version", &c.Version},
			{"CreatedAt", &c.CreatedAt}} {
			f(p.n, p.s)
		}
	case *LogColumns:
		for _, p := range []struct {
			n string
			s *string
		}{{"MessageID", &c.MessageID}, {"Topic", &c.Topic}, {"Tag", &c.Tag}, {"Status", &c.Status},
			{"RetryCount", &c.RetryCount}, {"Error", &c.Error}, {"CreatedAt", &c.CreatedAt}, {"UpdatedAt", &c.UpdatedAt}} {
			f(p.n, p.s)
		}
	}
}

// q quotes a column name.
func q(col string) string { return ident.Quote(col) }

// list renders columns as a comma-separated, quoted SQL list.
func list(cols ...string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = q(c)
	}
	return strings.Join(out, ", ")
}
