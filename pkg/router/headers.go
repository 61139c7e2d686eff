package router

// Headers a table maps besides its columns.headers: the W3C trace context
// (trace) and the CloudEvents binary-mode attributes (cloudevents). A value
// that does not fit its header leaves the header out and is reported to
// WithHeaderProblem; the row is published all the same, since tracing
// metadata is never worth a message.

import (
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/tracecontext"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// HeaderProblem is told about a mapped header left out of a message because
// the row's value does not fit it (header is traceparent, tracestate,
// ce-source, ce-type or ce-time).
type HeaderProblem func(t *outbox.Table, messageID, header string, err error)

// CloudEvents header names (binary content mode: one header per attribute,
// with the ce- prefix of the HTTP binding; the message's content type is
// datacontenttype).
const (
	CESpecVersion = "ce-specversion"
	CEID          = "ce-id"
	CESource      = "ce-source"
	CEType        = "ce-type"
	CESubject     = "ce-subject"
	CETime        = "ce-time"
)

// ceTemplates are a table's parsed cloudevents templates.
type ceTemplates struct {
	source, typ, subject colval.Template
}

func parseCE(t *outbox.Table) (*ceTemplates, error) {
	ce := t.CloudEvents
	if !ce.Enabled {
		return nil, nil
	}
	var out ceTemplates
	var err error
	for _, p := range []struct {
		field string
		s     string
		dst   *colval.Template
	}{{"source", ce.Source, &out.source}, {"type", ce.Type, &out.typ}, {"subject", ce.Subject, &out.subject}} {
		if *p.dst, err = colval.ParseTemplate(p.s); err != nil {
			return nil, fmt.Errorf("table %s cloudevents.%s: %w", t.FullName(), p.field, err)
		}
	}
	return &out, nil
}

// mappedHeaders adds the trace context and CloudEvents headers to pub.
func (r *Router) mappedHeaders(row *outbox.Row, tr *tableRoute, pub *amqp.Publishing, lookup func(string) (any, bool)) {
	t := row.Table
	if t.Trace.Format == "" && tr.ce == nil {
		return
	}
	if pub.Headers == nil {
		pub.Headers = amqp.Table{}
	}
	if t.Trace.Format != "" {
		r.traceHeaders(row, pub)
	}
	if tr.ce != nil {
		r.ceHeaders(row, tr.ce, pub, lookup)
	}
}

func (r *Router) problem(t *outbox.Table, msgID, header string, err error) {
	if r.onHeaderProblem != nil {
		r.onHeaderProblem(t, msgID, header, err)
	}
}

// traceHeaders sets traceparent and tracestate from the trace column. A
// traceparent that is not W3C leaves both out; a bad tracestate only itself.
// A header of that name from columns.headers never goes out unchecked.
func (r *Router) traceHeaders(row *outbox.Row, pub *amqp.Publishing) {
	t := row.Table
	delete(pub.Headers, tracecontext.TraceparentHeader)
	delete(pub.Headers, tracecontext.TracestateHeader)
	v := row.Values[t.Trace.ColumnName()]
	if v == nil {
		return // NULL: written outside any trace
	}
	var tp, ts string
	switch t.Trace.Format {
	case outbox.TraceDebezium:
		text := colval.ValueString(v)
		if strings.TrimSpace(text) == "" {
			return
		}
		props := parseProperties(text)
		var ok bool
		if tp, ok = props[tracecontext.TraceparentHeader]; !ok {
			r.problem(t, pub.MessageId, tracecontext.TraceparentHeader,
				fmt.Errorf("column %s has no traceparent entry (keys: %s): not W3C trace context", t.Trace.ColumnName(), keys(props)))
			return
		}
		ts = props[tracecontext.TracestateHeader]
	default:
		tp = colval.ValueString(v)
		if c := t.Trace.TracestateColumn; c != "" {
			ts = colval.ValueString(row.Values[c])
		}
		if strings.TrimSpace(tp) == "" {
			return
		}
	}
	sc, tsErr, err := tracecontext.Parse(tp, ts)
	if err != nil {
		r.problem(t, pub.MessageId, tracecontext.TraceparentHeader, err)
		return
	}
	pub.Headers[tracecontext.TraceparentHeader] = strings.TrimSpace(tp)
	if tsErr != nil {
		r.problem(t, pub.MessageId, tracecontext.TracestateHeader, tsErr)
	}
	if sc.TraceState != "" {
		pub.Headers[tracecontext.TracestateHeader] = sc.TraceState
	}
}

func keys(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return strings.Join(out, ", ")
}

// errNoValue marks a required CloudEvents attribute whose template has a NULL.
var errNoValue = errors.New("a column of the template is NULL or missing, or it renders empty")

// ceHeaders sets the CloudEvents attributes. Without source or type the
// message is no CloudEvent: no ce-* header at all.
func (r *Router) ceHeaders(row *outbox.Row, ce *ceTemplates, pub *amqp.Publishing, lookup func(string) (any, bool)) {
	t := row.Table
	src, missing := ce.source.Render(lookup)
	if missing != "" || src == "" {
		r.problem(t, pub.MessageId, CESource, fmt.Errorf("cloudevents.source %q: %w", t.CloudEvents.Source, errNoValue))
		return
	}
	typ, missing := ce.typ.Render(lookup)
	if missing != "" || typ == "" {
		r.problem(t, pub.MessageId, CEType, fmt.Errorf("cloudevents.type %q: %w", t.CloudEvents.Type, errNoValue))
		return
	}
	h := pub.Headers
	h[CESpecVersion], h[CEID], h[CESource], h[CEType] = "1.0", pub.MessageId, src, typ
	if !ce.subject.Empty() {
		if sub, missing := ce.subject.Render(lookup); missing == "" && sub != "" {
			h[CESubject] = sub
		}
	}
	if c := t.CloudEventsTimeColumn(); c != "" {
		tm, err := eventTime(t, c, row.Values[c])
		switch {
		case err != nil:
			r.problem(t, pub.MessageId, CETime, err)
		case !tm.IsZero():
			h[CETime] = tm.In(t.Location()).Format(time.RFC3339Nano)
		}
	}
}

// eventTime reads the ce-time column: a DATETIME or TIMESTAMP, or created_at
// stored as epoch seconds or milliseconds (created_at_epoch). NULL is the zero
// time (no ce-time).
func eventTime(t *outbox.Table, col string, v any) (time.Time, error) {
	if v == nil {
		return time.Time{}, nil
	}
	if tm, ok := v.(time.Time); ok {
		return tm, nil
	}
	if col == t.Columns.CreatedAt && t.CreatedAtEpoch != "" {
		if n, ok := colval.ValueUint64(v); ok {
			if t.CreatedAtEpoch == "ms" {
				return time.UnixMilli(int64(n)), nil
			}
			return time.Unix(int64(n), 0), nil
		}
	}
	return time.Time{}, fmt.Errorf("cloudevents time column %s holds %q, not a DATETIME or TIMESTAMP", col, colval.ValueString(v))
}
