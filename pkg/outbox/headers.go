package outbox

import (
	"errors"
	"fmt"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/ident"
)

// Trace context column formats (Trace.Format).
const (
	// TraceDebezium: the column holds java.util.Properties text with traceparent=
	// and tracestate= lines, as Debezium's outbox extension writes its
	// tracingspancontext column.
	TraceDebezium = "debezium"
	// TraceTraceparent: the column holds a W3C traceparent value.
	TraceTraceparent = "traceparent"
)

// Trace maps a column holding the W3C trace context of the transaction that
// wrote the row to the AMQP headers traceparent and tracestate. A value that is
// not W3C trace context leaves the header out; the row is published anyway.
type Trace struct {
	// Format is how the column holds the context: "debezium" or "traceparent".
	// Empty: no trace context.
	Format string `yaml:"format"`
	// Column defaults to tracingspancontext (format debezium) or traceparent
	// (format traceparent).
	Column string `yaml:"column"`
	// TracestateColumn (format traceparent only) holds the tracestate value.
	TracestateColumn string `yaml:"tracestate_column"`
}

// ColumnName is the trace context column in force ("" without a format).
func (tr Trace) ColumnName() string {
	switch {
	case tr.Column != "":
		return tr.Column
	case tr.Format == TraceDebezium:
		return "tracingspancontext"
	case tr.Format == TraceTraceparent:
		return "traceparent"
	}
	return ""
}

// CloudEvents adds the CloudEvents binary-mode attributes as headers: ce-specversion
// (1.0), ce-id (the message id), ce-source, ce-type, ce-subject and ce-time. The
// message's content type is the event's datacontenttype.
type CloudEvents struct {
	Enabled bool `yaml:"enabled"`
	// Source and Type are templates over the row ("{aggregatetype}"), required.
	Source string `yaml:"source"`
	Type   string `yaml:"type"`
	// Subject is an optional template.
	Subject string `yaml:"subject"`
	// TimeColumn holds the event's time; default columns.created_at. Without
	// one, or NULL, there is no ce-time.
	TimeColumn string `yaml:"time_column"`
}

// CloudEventsTimeColumn is the column ce-time is read from: cloudevents.time_column,
// else columns.created_at ("" for none).
func (t *Table) CloudEventsTimeColumn() string {
	if t.CloudEvents.TimeColumn != "" {
		return t.CloudEvents.TimeColumn
	}
	return t.Columns.CreatedAt
}

// validateHeaders checks the trace and cloudevents sections.
func (t *Table) validateHeaders(field string) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	tr := t.Trace
	switch tr.Format {
	case "":
		if tr.Column != "" || tr.TracestateColumn != "" {
			add(fmt.Errorf("%s.trace.format: required with trace.column (%q or %q)", field, TraceDebezium, TraceTraceparent))
		}
	case TraceDebezium, TraceTraceparent:
	default:
		add(fmt.Errorf("%s.trace.format: %q is not %q or %q", field, tr.Format, TraceDebezium, TraceTraceparent))
	}
	if tr.Column != "" {
		add(ident.Check(field+".trace.column", tr.Column))
	}
	if tr.TracestateColumn != "" {
		add(ident.Check(field+".trace.tracestate_column", tr.TracestateColumn))
		if tr.Format == TraceDebezium {
			add(fmt.Errorf("%s.trace.tracestate_column: format debezium reads tracestate from the same column", field))
		}
	}
	ce := t.CloudEvents
	if !ce.Enabled {
		if ce.Source != "" || ce.Type != "" || ce.Subject != "" || ce.TimeColumn != "" {
			add(fmt.Errorf("%s.cloudevents.enabled: set it to true to publish the cloudevents attributes configured", field))
		}
		return errors.Join(errs...)
	}
	for _, tmpl := range []struct {
		name, s  string
		required bool
	}{{"source", ce.Source, true}, {"type", ce.Type, true}, {"subject", ce.Subject, false}} {
		if tmpl.s == "" {
			if tmpl.required {
				add(fmt.Errorf("%s.cloudevents.%s: required with cloudevents.enabled (a template such as \"{aggregatetype}\")", field, tmpl.name))
			}
			continue
		}
		if _, err := colval.ParseTemplate(tmpl.s); err != nil {
			add(fmt.Errorf("%s.cloudevents.%s: %w", field, tmpl.name, err))
		}
	}
	if ce.TimeColumn != "" {
		add(ident.Check(field+".cloudevents.time_column", ce.TimeColumn))
	}
	return errors.Join(errs...)
}

// headerColumns are the columns the trace and cloudevents sections read, keyed
// by the config field that names each (for MappedColumns).
func (t *Table) headerColumns(out map[string]string) {
	if c := t.Trace.ColumnName(); c != "" {
		out["trace.column"] = c
	}
	if c := t.Trace.TracestateColumn; c != "" {
		out["trace.tracestate_column"] = c
	}
	ce := t.CloudEvents
	if !ce.Enabled {
		return
	}
	for _, tmpl := range []struct{ name, s string }{{"source", ce.Source}, {"type", ce.Type}, {"subject", ce.Subject}} {
		parsed, _ := colval.ParseTemplate(tmpl.s)
		for _, col := range parsed.Columns() {
			out["cloudevents."+tmpl.name+" {"+col+"}"] = col
		}
	}
	if c := t.CloudEventsTimeColumn(); c != "" {
		out["cloudevents.time_column"] = c
	}
}
