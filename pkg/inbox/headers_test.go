package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// The headers column gives back every header with its AMQP type, and leaves out the
// ones the broker or the inbox itself sets on a delivery.
func TestHeadersRoundTripKeepsTypes(t *testing.T) {
	at := time.Date(2025, 2, 4, 10, 0, 0, 0, time.UTC)
	in := amqp.Table{
		"traceparent": testTraceparent, "tracestate": "rojo=1", "ce-id": "m-1",
		"bin": []byte{0, 0xff, 'a'}, "notutf8": string([]byte{0xff, 0xfe}), "flag": true,
		"i8": int8(-8), "u8": uint8(8), "i16": int16(-16), "u16": uint16(16), "i32": int32(-32), "u32": uint32(32),
		"i64": int64(-1 << 60), "f32": float32(1.5), "f64": 2.25, "dec": amqp.Decimal{Scale: 2, Value: 12345},
		"when": at, "none": nil, "list": []any{"a", int32(1)}, "nested": amqp.Table{"k": int16(3)},
		"x-death": []any{amqp.Table{"count": int64(1)}}, "x-first-death-queue": "q", "x-delivery-count": int64(2),
		RetryCountHeader: int32(4),
	}
	enc := encodeHeaders(in)
	s, ok := enc.(string)
	if !ok || !strings.Contains(s, `"traceparent":["string","`+testTraceparent+`"]`) {
		t.Fatalf("encoded %v", enc)
	}
	out, err := decodeHeaders([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x-death", "x-first-death-queue", "x-delivery-count", RetryCountHeader} {
		if _, ok := out[k]; ok {
			t.Errorf("%s was kept", k)
		}
		delete(in, k)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip changed the headers:\n in  %#v\n out %#v", in, out)
	}
	if encodeHeaders(amqp.Table{"x-death": "only"}) != nil || encodeHeaders(nil) != nil {
		t.Error("nothing to keep must be NULL")
	}
	if _, err := decodeHeaders([]byte(`{"a":["nosuchtype",1]}`)); err == nil {
		t.Error("an unknown type was accepted")
	}
}

// The handler's context carries the W3C trace context of a valid traceparent, then
// whatever the WithContextFromHeaders options add; a bad traceparent carries none.
func TestHandlerContextFromHeaders(t *testing.T) {
	type key struct{}
	in := &Inbox{fromHeaders: []ContextFromHeaders{func(ctx context.Context, h amqp.Table) context.Context {
		return context.WithValue(ctx, key{}, HeaderString(h, "ce-id"))
	}}}
	ctx := in.handlerContext(context.Background(), Message{Headers: amqp.Table{
		"traceparent": []byte(testTraceparent), "tracestate": "rojo=1", "ce-id": "m-1"}})
	sc, ok := SpanContextFromContext(ctx)
	if !ok || sc.TraceIDString() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.TraceState != "rojo=1" || !sc.Sampled() {
		t.Fatalf("span context %+v %v", sc, ok)
	}
	if ctx.Value(key{}) != "m-1" {
		t.Fatal("the option's context was not applied")
	}
	ctx = in.handlerContext(context.Background(), Message{Headers: amqp.Table{"traceparent": "00-bad"}})
	if _, ok := SpanContextFromContext(ctx); ok {
		t.Fatal("an invalid traceparent reached the handler's context")
	}
}

// attempt is what a handler saw on one call.
type attempt struct {
	id      string
	trace   string // the trace id in the handler's context
	headers amqp.Table
	retry   int
}

// failFirstAttempt is a handler that records every call and fails each
// message's first attempt (retry count 0), so that each comes back once
// through the retry task.
type failFirstAttempt struct {
	mu    sync.Mutex
	calls []attempt
}

func (f *failFirstAttempt) handle(ctx context.Context, _ *sql.Tx, m Message) error {
	sc, _ := SpanContextFromContext(ctx)
	f.mu.Lock()
	f.calls = append(f.calls, attempt{m.ID, sc.TraceIDString(), m.Headers, m.RetryCount})
	f.mu.Unlock()
	if m.RetryCount == 0 {
		return fmt.Errorf("first attempt fails")
	}
	return nil
}

func (f *failFirstAttempt) attempts() []attempt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]attempt(nil), f.calls...)
}

// retriedOnce publishes p to a consumer on cfg whose handler fails the first
// attempt, and returns the handler's calls once p is SUCCESS.
func (e *testEnv) retriedOnce(t testing.TB, cfg Config, p amqp.Publishing) []attempt {
	t.Helper()
	var f failFirstAttempt
	rc := e.startConsumer(cfg, f.handle)
	e.publishMany([]amqp.Publishing{p})
	e.waitOneRow(t, p.MessageId, StatusSuccess)
	rc.stop(t)
	return f.attempts()
}

// A message with a trace context and headers of several types: the handler's
// context carries its trace id on the first attempt and on the retry the retry task
// republished, which carries the original headers, types kept, and the retry count.
func TestRetryKeepsHeadersAndTraceContext(t *testing.T) {
	e := newParallelTestEnv(t)
	attempts := e.retriedOnce(t, e.config(), amqp.Publishing{MessageId: "traced-1", Body: itemBody(1), Headers: amqp.Table{
		"traceparent": testTraceparent, "tracestate": "rojo=1", "tenant": "acme", "priority": int32(7)}})
	if len(attempts) != 2 {
		t.Fatalf("%d attempts, want 2", len(attempts))
	}
	for i, a := range attempts {
		if a.trace != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("attempt %d: handler context trace id %q", i+1, a.trace)
		}
		if a.headers["tenant"] != "acme" || a.headers["priority"] != int32(7) || a.headers["tracestate"] != "rojo=1" {
			t.Errorf("attempt %d: headers %#v", i+1, a.headers)
		}
	}
	if r := attempts[1]; r.retry != 1 || r.headers[RetryCountHeader] != int32(1) {
		t.Errorf("retry: RetryCount %d, header %v", r.retry, r.headers[RetryCountHeader])
	}
}

// An inbox table made before the headers column existed is refused with the ALTER
// TABLE that adds it; Columns.Headers "-" runs without it, retries then going out
// without the original headers.
func TestTableWithoutHeadersColumn(t *testing.T) {
	e := newParallelTestEnv(t)
	e.exec(`ALTER TABLE consumer_message DROP COLUMN headers`)
	cfg := e.config()
	err := e.startError(t, cfg)
	if err == nil || !strings.Contains(err.Error(), "ALTER TABLE `consumer_message` ADD COLUMN `headers` MEDIUMTEXT NULL") {
		t.Fatalf("Run() = %v, want the ALTER TABLE that adds the column", err)
	}
	cfg.Columns.Headers = "-"
	attempts := e.retriedOnce(t, cfg, amqp.Publishing{MessageId: "old-table-1", Body: itemBody(1),
		Headers: amqp.Table{"traceparent": testTraceparent}})
	retried := attempts[len(attempts)-1].headers
	if _, ok := retried["traceparent"]; ok || retried[RetryCountHeader] != int32(1) {
		t.Errorf("retry headers %v: want only the retry count without a headers column", retried)
	}
}

// Many first attempts failing at once, on pools opened every way users open
// theirs (dsnVariants): each handler runs once per delivery, so each message's
// failed attempt keeps its backoff. Concurrent failure records used to read their
// missing rows FOR UPDATE, each locking the gap where its row would go, and then
// insert into it: InnoDB deadlocks, and a record that lost three in a row sent the
// deadlock back to the delivery's transaction, which ran the handler again at once
// (on every DSN; fewer round trips only made it rarer).
func TestConcurrentFailuresRunEachHandlerOncePerDelivery(t *testing.T) {
	for _, v := range dsnVariants {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			e := newTestEnvWith(t, v.options)
			var f failFirstAttempt
			cfg := e.config()
			cfg.Workers = 8
			rc := e.startConsumer(cfg, f.handle)
			const n = 100
			var msgs []amqp.Publishing
			for i := range n {
				msgs = append(msgs, amqp.Publishing{MessageId: fmt.Sprintf("burst-%03d", i), Body: itemBody(1)})
			}
			e.publishMany(msgs)
			testenv.WaitFor(t, 30*time.Second, "every message SUCCESS", func() (bool, string) {
				done := e.count(`SELECT COUNT(*) FROM consumer_message WHERE status = 'SUCCESS'`)
				return done == n, fmt.Sprintf("%d of %d SUCCESS", done, n)
			})
			rc.stop(t)
			calls := map[string][]int{}
			for _, a := range f.attempts() {
				calls[a.id] = append(calls[a.id], a.retry)
			}
			for id, got := range calls {
				if len(got) != 2 || got[0] != 0 || got[1] != 1 {
					t.Errorf("%s: handler ran with retry counts %v, want [0 1]", id, got)
				}
			}
			if len(calls) != n {
				t.Errorf("handler saw %d messages, want %d", len(calls), n)
			}
		})
	}
}
