package router

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

type problem struct{ msgID, header, err string }

// routeReporting routes one row and returns the problems reported.
func routeReporting(t *testing.T, tb *outbox.Table, values map[string]any) (*Message, []problem) {
	t.Helper()
	var got []problem
	r, err := New([]*outbox.Table{tb}, WithAppID("relay-test"), WithHeaderProblem(func(_ *outbox.Table, msgID, header string, err error) {
		got = append(got, problem{msgID, header, err.Error()})
	}))
	if err != nil {
		t.Fatal(err)
	}
	msg, err := r.Route(&outbox.Row{Table: tb, Values: values, ID: values[tb.Columns.ID]})
	if err != nil {
		t.Fatalf("a row with bad trace data must still be routed: %v", err)
	}
	return msg, got
}

// Debezium's tracingspancontext is java.util.Properties text; the traceparent and
// tracestate in it become headers. Anything not W3C leaves its header out, is
// reported, and the row is published.
func TestTraceContextDebeziumColumn(t *testing.T) {
	tb := preset(t, "debezium", func(p *outbox.Table) { p.Trace.Format = outbox.TraceDebezium })
	row := func(ctx any) map[string]any {
		return map[string]any{"id": "e-1", "aggregatetype": "order", "aggregateid": "7", "type": "created",
			"payload": []byte(`{}`), "tracingspancontext": ctx}
	}
	for _, c := range []struct {
		name      string
		ctx       any
		tp, ts    string // headers expected ("" = absent)
		reported  string // header reported, "" for none
		errSubstr string
	}{
		{name: "as Debezium writes it", ctx: "#Tue Feb 04 10:00:00 UTC 2025\ntraceparent=" + tp + "\n", tp: tp},
		{name: "with tracestate, escaped =", ctx: []byte("#c\r\ntracestate=rojo\\=00f067aa0ba902b7,congo\\=t61\r\ntraceparent=" + tp + "\r\n"),
			tp: tp, ts: "rojo=00f067aa0ba902b7,congo=t61"},
		{name: "colon separator and blanks", ctx: "traceparent : " + tp, tp: tp},
		{name: "NULL: no trace", ctx: nil},
		{name: "empty: no trace", ctx: "  "},
		{name: "OpenTracing's uber-trace-id is not W3C", ctx: "uber-trace-id=abc:def:0:1\n", reported: "traceparent", errSubstr: "uber-trace-id"},
		{name: "upper-case traceparent", ctx: "traceparent=" + strings.ToUpper(tp), reported: "traceparent", errSubstr: "lowercase"},
		{name: "bad tracestate alone is dropped", ctx: "traceparent=" + tp + "\ntracestate=Rojo\\=1", tp: tp, reported: "tracestate", errSubstr: "Rojo"},
	} {
		msg, problems := routeReporting(t, tb, row(c.ctx))
		h := msg.Publishing.Headers
		if got, _ := h["traceparent"].(string); got != c.tp {
			t.Errorf("%s: traceparent %q, want %q", c.name, got, c.tp)
		}
		if got, _ := h["tracestate"].(string); got != c.ts {
			t.Errorf("%s: tracestate %q, want %q", c.name, got, c.ts)
		}
		switch {
		case c.reported == "" && len(problems) > 0:
			t.Errorf("%s: reported %v", c.name, problems)
		case c.reported != "" && (len(problems) != 1 || problems[0].header != c.reported || problems[0].msgID != "e-1" ||
			!strings.Contains(problems[0].err, c.errSubstr)):
			t.Errorf("%s: reported %v, want one %s problem saying %q", c.name, problems, c.reported, c.errSubstr)
		}
		if h["aggregateid"] != "7" {
			t.Errorf("%s: the other headers were lost: %v", c.name, h)
		}
	}
}

// A plain traceparent column, with an optional tracestate column. A header of
// the same name copied by columns.headers never goes out unchecked.
func TestTraceContextTraceparentColumn(t *testing.T) {
	tb := preset(t, "producer-message", func(p *outbox.Table) {
		p.Trace = outbox.Trace{Format: outbox.TraceTraceparent, TracestateColumn: "ts"}
		p.Columns.Headers = []string{"traceparent"}
	})
	row := func(tpv, tsv any) map[string]any {
		return map[string]any{"id": int64(1), "message_id": "m-1", "exchange": "orders", "routing_key": "k",
			"content": []byte(`{}`), "status": "PENDING", "traceparent": tpv, "ts": tsv}
	}
	msg, problems := routeReporting(t, tb, row(" "+tp+" ", "rojo=1"))
	if h := msg.Publishing.Headers; h["traceparent"] != tp || h["tracestate"] != "rojo=1" || len(problems) != 0 {
		t.Fatalf("headers %v, problems %v", h, problems)
	}
	msg, problems = routeReporting(t, tb, row("00-xyz", "rojo=1"))
	if h := msg.Publishing.Headers; h["traceparent"] != nil || h["tracestate"] != nil || len(problems) != 1 {
		t.Fatalf("a bad traceparent went out: headers %v, problems %v", h, problems)
	}
	if cols := tb.MappedColumns(); cols["trace.column"] != "traceparent" || cols["trace.tracestate_column"] != "ts" {
		t.Fatalf("mapped columns %v lack the trace columns (check and the sweeper read them)", cols)
	}
}

func TestCloudEventsHeaders(t *testing.T) {
	created := time.Date(2025, 2, 4, 10, 0, 0, 123000000, time.UTC)
	tb := preset(t, "debezium", func(p *outbox.Table) {
		p.Columns.CreatedAt = "created"
		p.CloudEvents = outbox.CloudEvents{Enabled: true, Source: "/shop/{origin}", Type: "com.shop.{type}", Subject: "{aggregateid}"}
	})
	values := map[string]any{"id": "e-9", "aggregatetype": "order", "aggregateid": "7", "type": "created",
		"payload": []byte(`{}`), "created": created, "origin": "web"}
	msg, problems := routeReporting(t, tb, values)
	want := amqp.Table{"ce-specversion": "1.0", "ce-id": "e-9", "ce-source": "/shop/web", "ce-type": "com.shop.created",
		"ce-subject": "7", "ce-time": "2025-02-04T10:00:00.123Z"}
	for k, v := range want {
		if msg.Publishing.Headers[k] != v {
			t.Errorf("%s = %v, want %v", k, msg.Publishing.Headers[k], v)
		}
	}
	if len(problems) != 0 || msg.Publishing.ContentType != "application/json" {
		t.Errorf("problems %v, content type %q", problems, msg.Publishing.ContentType)
	}
	values["origin"] = nil
	msg, problems = routeReporting(t, tb, values)
	if _, ok := msg.Publishing.Headers["ce-id"]; ok || len(problems) != 1 || problems[0].header != "ce-source" {
		t.Errorf("without a source: headers %v, problems %v; want no ce-* and one ce-source problem", msg.Publishing.Headers, problems)
	}

	ev := preset(t, "eventuate", func(p *outbox.Table) {
		p.CloudEvents = outbox.CloudEvents{Enabled: true, Source: "eventuate", Type: "{destination}"}
	})
	msg, _ = routeReporting(t, ev, map[string]any{"id": "x-1", "destination": "orders", "payload": []byte(`{}`),
		"published": int8(0), "creation_time": int64(1738663200123), "headers": nil})
	if got := msg.Publishing.Headers["ce-time"]; got != "2025-02-04T10:00:00.123Z" {
		t.Errorf("ce-time from epoch milliseconds: %v", got)
	}
}

func TestCloudEventsAndTraceValidation(t *testing.T) {
	for _, c := range []struct {
		change func(*outbox.Table)
		want   string
	}{
		{func(p *outbox.Table) { p.Trace.Format = "b3" }, `tables[0].trace.format: "b3" is not`},
		{func(p *outbox.Table) { p.Trace.Column = "tp" }, "tables[0].trace.format: required with trace.column"},
		{func(p *outbox.Table) { p.Trace = outbox.Trace{Format: "debezium", TracestateColumn: "ts"} }, "tables[0].trace.tracestate_column"},
		{func(p *outbox.Table) { p.Trace = outbox.Trace{Format: "traceparent", Column: "trace-id"} }, "tables[0].trace.column"},
		{func(p *outbox.Table) { p.CloudEvents = outbox.CloudEvents{Enabled: true, Type: "t"} }, "tables[0].cloudevents.source: required"},
		{func(p *outbox.Table) { p.CloudEvents = outbox.CloudEvents{Enabled: true, Source: "s", Type: "{a"} }, "tables[0].cloudevents.type"},
		{func(p *outbox.Table) { p.CloudEvents = outbox.CloudEvents{Source: "s"} }, "tables[0].cloudevents.enabled"},
	} {
		p, _ := outbox.Preset("debezium")
		p.Schema = "app"
		c.change(&p)
		err := p.Validate("tables[0]")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one naming %q", err, c.want)
		}
	}
}

func TestParseProperties(t *testing.T) {
	got := parseProperties("# comment\n! also\n\n  a=1\nb : 2\nc 3\nd\\=e=f\\:g\nlong=x\\\n    y\\\\\nu=\\u00e9\\t|\n=empty key\n")
	want := map[string]string{"a": "1", "b": "2", "c": "3", "d=e": "f:g", "long": `xy\`, "u": "é\t|", "": "empty key"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%q = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %v", got)
	}
}
