package integration

// Trace context end to end: an outbox row written with a traceparent reaches
// a pkg/inbox handler whose context carries the same trace, also after the
// inbox's retry task republished it; CloudEvents attributes travel along.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
	"github.com/binlog-relay/binlog-relay/pkg/inbox/otelinbox"
)

// attempt is what one handler call saw.
type attempt struct {
	id, trace, otelTrace, tracestate string
	retry                            int
	headers                          amqp.Table
}

// Test: two tables, a seed producer_message with a plain traceparent column and
// a Debezium outbox with its tracingspancontext column and CloudEvents, stream
// through the relay into a consumer using pkg/inbox (with otelinbox). The
// handler fails each message's first attempt, so each is delivered again by
// the inbox's retry task. Every attempt's context carries the trace id the row
// was written with, both through inbox.SpanContextFromContext and through OpenTelemetry; the
// retry carries the original headers. A row with a malformed traceparent is
// published without it and counted.
func TestTraceContextReachesInboxHandlerAcrossRetry(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql", "schema/debezium_outbox.sql", "schema/consumer_message.sql")
	if _, err := db.Primary.Exec(`ALTER TABLE producer_message ADD COLUMN traceparent VARCHAR(64) NULL, ADD COLUMN tracestate VARCHAR(512) NULL`); err != nil {
		t.Fatal(err)
	}
	// The relay's start-up check reads the columns on the replica.
	db.WaitReplicated(t, 30*time.Second)
	br := testenv.NewBroker(t)
	tables := fmt.Sprintf(`  - {preset: producer-message, schema: %[1]s, trace: {format: traceparent, tracestate_column: tracestate}}
  - preset: debezium
    schema: %[1]s
    trace: {format: debezium}
    cloudevents: {enabled: true, source: "/shop/{aggregatetype}", type: "shop.{type}", subject: "{aggregateid}"}
`, db.Name)
	r := relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("trace"), tables, ""))

	var mu sync.Mutex
	var seen []attempt
	handle := func(ctx context.Context, _ *sql.Tx, m inbox.Message) error {
		sc, ok := inbox.SpanContextFromContext(ctx)
		a := attempt{id: m.ID, otelTrace: trace.SpanContextFromContext(ctx).TraceID().String(),
			tracestate: sc.TraceState, retry: m.RetryCount, headers: m.Headers}
		if ok {
			a.trace = sc.TraceIDString()
		}
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, a)
		if m.RetryCount == 0 {
			return fmt.Errorf("first attempt of %s fails", m.ID)
		}
		return nil
	}
	runInbox(t, inbox.Config{Queue: br.Queue, ConsumerName: "traced",
		RetryBackoff: 50 * time.Millisecond, RetryMaxBackoff: 100 * time.Millisecond, RetryInterval: 50 * time.Millisecond,
		DisableRetention: true}, db.Primary, handle, otelinbox.WithPropagator(nil))

	const (
		tp1 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		tp2 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	)
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Primary.Exec(q, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO producer_message (message_id, exchange, routing_key, content, traceparent, tracestate) VALUES
		('seed-traced', ?, 'order.created', '{}', ?, 'rojo=00f067aa0ba902b7'),
		('seed-malformed', ?, 'order.created', '{}', '00-not-a-trace', NULL)`, br.Exchange, tp1, br.Exchange)
	exec(`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload, tracingspancontext) VALUES
		('7c1d3c6e-1d0f-4a5e-9d43-5b0b0e1f2a01', ?, 'order-42', 'created', '{}', ?)`,
		br.Exchange, "#Tue Feb 04 10:00:00 UTC 2025\ntraceparent="+tp2+"\n")

	byID := func() map[string][]attempt {
		mu.Lock()
		defer mu.Unlock()
		out := map[string][]attempt{}
		for _, a := range seen {
			out[a.id] = append(out[a.id], a)
		}
		return out
	}
	ids := []string{"seed-traced", "seed-malformed", "7c1d3c6e-1d0f-4a5e-9d43-5b0b0e1f2a01"}
	testenv.Eventually(t, 30*time.Second, func() bool {
		got := byID()
		for _, id := range ids {
			if a := got[id]; len(a) == 0 || a[len(a)-1].retry == 0 {
				return false
			}
		}
		return true
	}, "not every message was handled again after the retry task republished it: %+v", &seen)

	got := byID()
	// Every attempt carries the trace: the first delivery, and the one the
	// inbox's retry task republished (the last; a deadlock between workers
	// recording their failures may run a first attempt twice).
	for id, want := range map[string]string{"seed-traced": strings.Split(tp1, "-")[1],
		"7c1d3c6e-1d0f-4a5e-9d43-5b0b0e1f2a01": strings.Split(tp2, "-")[1], "seed-malformed": ""} {
		otelWant := want
		if want == "" {
			otelWant = trace.TraceID{}.String()
		}
		for i, a := range got[id] {
			if a.trace != want || a.otelTrace != otelWant {
				t.Errorf("%s attempt %d (retry %d): trace %q, OpenTelemetry trace %q; want %q", id, i+1, a.retry, a.trace, a.otelTrace, want)
			}
		}
		first, last := got[id][0], got[id][len(got[id])-1]
		if first.retry != 0 || last.retry != 1 || last.headers[inbox.RetryCountHeader] != int32(1) {
			t.Errorf("%s: attempts %+v: want a first delivery, then the retry task's republish", id, got[id])
		}
		t.Logf("%s: handled with trace %q, then after the retry republish (x-inbox-retry-count %v) with %q",
			id, first.trace, last.headers[inbox.RetryCountHeader], last.trace)
	}
	retried := func(id string) attempt { return got[id][len(got[id])-1] }
	if ts := retried("seed-traced").tracestate; ts != "rojo=00f067aa0ba902b7" {
		t.Errorf("tracestate after the retry: %q", ts)
	}
	ev := retried("7c1d3c6e-1d0f-4a5e-9d43-5b0b0e1f2a01").headers
	for k, v := range map[string]any{"ce-specversion": "1.0", "ce-id": "7c1d3c6e-1d0f-4a5e-9d43-5b0b0e1f2a01",
		"ce-source": "/shop/" + br.Exchange, "ce-type": "shop.created", "ce-subject": "order-42", "aggregateid": "order-42",
		inbox.RetryCountHeader: int32(1)} {
		if ev[k] != v {
			t.Errorf("republished event header %s = %v, want %v", k, ev[k], v)
		}
	}
	if _, ok := got["seed-malformed"][0].headers["traceparent"]; ok {
		t.Error("a malformed traceparent was published")
	}
	n, err := testutil.GatherAndCount(r.App.Metrics().Registry(), "binlog_relay_headers_omitted_total")
	if err != nil || n != 1 {
		t.Errorf("headers_omitted_total: %d series (%v), want one for the malformed row", n, err)
	}
}
