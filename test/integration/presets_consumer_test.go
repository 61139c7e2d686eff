package integration

// A consumer that is not Go reads what the presets publish: Python's pika
// (testdata/presets_consumer.py) takes one message of each preset off a queue
// and reports its properties and each header's AMQP field type, so the test
// sees what a Debezium or Eventuate consumer in another language would see,
// not what amqp091-go makes of it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// pikaMessage is one message as testdata/presets_consumer.py prints it.
type pikaMessage struct {
	Exchange        string                `json:"exchange"`
	RoutingKey      string                `json:"routing_key"`
	MessageID       string                `json:"message_id"`
	ContentType     string                `json:"content_type"`
	Type            *string               `json:"type"`
	AppID           string                `json:"app_id"`
	DeliveryMode    int                   `json:"delivery_mode"`
	Timestamp       int64                 `json:"timestamp"`
	TimestampPython string                `json:"timestamp_python"`
	Headers         map[string]pikaHeader `json:"headers"`
	Body            string                `json:"body"`
}

// pikaHeader is one header: its AMQP field-type tag ("S" long string, "l"
// long-long int, "T" timestamp, ...), the Python type pika decoded it to,
// and its value.
type pikaHeader struct {
	AMQP   string `json:"amqp"`
	Python string `json:"python"`
	Value  any    `json:"value"`
}

// pikaPython is a Python 3 that can import pika: $RELAY_TEST_PYTHON, else
// python3 on PATH, else Debian's /usr/bin/python3 (where python3-pika
// installs, which a pyenv or venv python3 earlier on PATH does not see).
// Without one the test fails, naming the package to install: it is never
// skipped as if it had passed.
func pikaPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, c := range []string{testenv.Env("RELAY_TEST_PYTHON", ""), "python3", "/usr/bin/python3"} {
		if c == "" {
			continue
		}
		path, err := exec.LookPath(c)
		if err != nil {
			tried = append(tried, c+": not found")
			continue
		}
		out, err := exec.Command(path, "-c", "import pika; print(pika.__version__)").CombinedOutput()
		if err == nil {
			t.Logf("consumer: pika %s on %s", strings.TrimSpace(string(out)), path)
			return path
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		tried = append(tried, fmt.Sprintf("%s: %s", path, lines[len(lines)-1]))
	}
	t.Fatalf("this test consumes with Python's pika and found none: apt-get install -y python3-pika "+
		"(scripts/stack.sh up installs it), or set RELAY_TEST_PYTHON to a python3 that has it; tried %s", strings.Join(tried, "; "))
	return ""
}

// Test: one row of each preset, inserted on the primary as its producers
// write it, reaches a pika consumer with the properties and header types
// the preset promises (docs/presets.md): every header a long string where
// the column is text, Debezium's event id in the "id" header, and for
// Eventuate a body that parses as Eventuate's message (a string payload and
// a map of string headers).
func TestPresetsConsumedByPika(t *testing.T) {
	testenv.Integration(t)
	python := pikaPython(t)
	db := testenv.NewDB(t, "schema/producer_message.sql", "schema/local_message.sql", "schema/message_record.sql",
		"schema/debezium_outbox.sql", "schema/eventuate_message.sql")
	br := testenv.NewBroker(t)
	var tables strings.Builder
	for _, p := range []string{"producer-message", "local-message", "message-record", "debezium", "eventuate"} {
		fmt.Fprintf(&tables, "  - {preset: %s, schema: %s}\n", p, db.Name)
	}
	name := testenv.UniqueName("pika")
	relaytest.StartRelay(t, relaytest.RelayConfig(name, tables.String(), ""))
	start := time.Now()

	const (
		debeziumID  = "4d47e190-0402-4048-bc2c-89dd54343cdc"
		eventuateID = "0000018c2f1a7b3e-0242ac1100020000"
		evPayload   = `{"orderId":"o-17","note":"Zoë 佐藤 🚀 <b>&</b>","total":12.5}`
	)
	// Eventuate's producer writes these headers (MessageProducerImpl: ID,
	// DESTINATION, DATE; DomainEventPublisher: PARTITION_ID and the event-*
	// ones), all strings. x-attempt is a number, which Eventuate's own
	// producer never writes, to show how each side types one.
	evHeaders := map[string]any{"ID": eventuateID, "DESTINATION": br.Exchange, "DATE": "Tue, 4 Feb 2025 10:00:00 GMT",
		"PARTITION_ID": "o-17", "event-aggregate-type": "com.example.Order", "event-aggregate-id": "o-17",
		"event-type": "com.example.OrderCreated", "x-attempt": 2}
	evHeadersJSON, _ := json.Marshal(evHeaders)
	for _, ins := range []struct {
		q    string
		args []any
	}{
		{`INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES ('pika-pm-1', ?, 'order.created', '{"n":1}')`,
			[]any{br.Exchange}},
		{`INSERT INTO local_message (biz_id, biz_type, exchange, routing_key, message_body) VALUES ('B-7', 'order', ?, 'order.paid', '{"n":2}')`,
			[]any{br.Exchange}},
		{`INSERT INTO t_message_record (message_id, topic, tag, message_body) VALUES ('pika-mr-1', ?, 'TagA', 'body three')`,
			[]any{br.Exchange}},
		{`INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, ?, 'o-17', 'OrderCreated', '{"id":"o-17","total":12.5}')`,
			[]any{debeziumID, br.Exchange}},
		{`INSERT INTO message (id, destination, headers, payload, published, creation_time) VALUES (?, ?, ?, ?, 0, ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000))`,
			[]any{eventuateID, br.Exchange, string(evHeadersJSON), evPayload}},
	} {
		db.Exec(t, ins.q, ins.args...)
	}
	debeziumBody := asStored(t, db, "outbox", "id", debeziumID, `{"id":"o-17","total":12.5}`)

	// Every message is in the queue before pika reads it.
	_, ch := testenv.Dial(t)
	testenv.Eventually(t, 30*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive(br.Queue, true, false, false, false, nil)
		return err == nil && q.Messages >= 5
	}, "the relay did not publish the five rows")

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, python, "testdata/presets_consumer.py", testenv.AMQPURL, br.Queue, "5")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("pika consumer: %v\n%s", err, stderr.String())
	}
	var msgs []pikaMessage
	if err := json.Unmarshal(out, &msgs); err != nil || len(msgs) != 5 {
		t.Fatalf("pika consumer printed %d messages (%v):\n%s", len(msgs), err, out)
	}

	// S is an AMQP long string, which pika decodes to str.
	str := func(v string) pikaHeader { return pikaHeader{AMQP: "S", Python: "str", Value: v} }
	evAMQP := map[string]pikaHeader{}
	evStrings := map[string]string{}
	for k, v := range evHeaders {
		if s, ok := v.(string); ok {
			evAMQP[k], evStrings[k] = str(s), s
		}
	}
	// A JSON integer in the headers column is an AMQP long-long (l) header,
	// which pika decodes to its int subclass long, and in the envelope the
	// string "2" (Eventuate's headers are strings).
	evAMQP["x-attempt"], evStrings["x-attempt"] = pikaHeader{AMQP: "l", Python: "long", Value: float64(2)}, "2"

	want := []struct {
		preset, id, routingKey, body string
		headers                      map[string]pikaHeader
	}{
		{"producer-message", "pika-pm-1", "order.created", `{"n":1}`, nil},
		{"local-message", "1", "order.paid", `{"n":2}`, map[string]pikaHeader{"biz_id": str("B-7"), "biz_type": str("order")}},
		{"message-record", "pika-mr-1", "TagA", "body three", map[string]pikaHeader{"topic": str(br.Exchange), "tag": str("TagA")}},
		{"debezium", debeziumID, "OrderCreated", debeziumBody, map[string]pikaHeader{"id": str(debeziumID),
			"aggregatetype": str(br.Exchange), "aggregateid": str("o-17"), "type": str("OrderCreated")}},
		{"eventuate", eventuateID, br.Exchange, "", evAMQP},
	}
	for i, w := range want {
		m := msgs[i]
		t.Logf("%s: %+v", w.preset, m)
		if m.MessageID != w.id || m.Exchange != br.Exchange || m.RoutingKey != w.routingKey {
			t.Errorf("%s: message %s on %s/%s, want %s on %s/%s", w.preset, m.MessageID, m.Exchange, m.RoutingKey, w.id, br.Exchange, w.routingKey)
		}
		// The properties every preset sets: persistent, JSON, the relay's
		// name as app-id, a timestamp (an AMQP timestamp, whole seconds,
		// which pika gives as an int), and no type.
		if m.ContentType != "application/json" || m.DeliveryMode != 2 || m.AppID != name || m.Type != nil {
			t.Errorf("%s: content_type %q delivery_mode %d app_id %q type %v", w.preset, m.ContentType, m.DeliveryMode, m.AppID, m.Type)
		}
		if ts := time.Unix(m.Timestamp, 0); m.TimestampPython != "int" || ts.Before(start.Add(-time.Minute)) || ts.After(time.Now().Add(time.Minute)) {
			t.Errorf("%s: timestamp %d (%s), want around %s", w.preset, m.Timestamp, m.TimestampPython, start.UTC())
		}
		if len(m.Headers) != len(w.headers) {
			t.Errorf("%s: headers %v, want %v", w.preset, m.Headers, w.headers)
		}
		for k, h := range w.headers {
			if m.Headers[k] != h {
				t.Errorf("%s: header %s is %+v, want %+v", w.preset, k, m.Headers[k], h)
			}
		}
		if w.preset != "eventuate" && m.Body != w.body {
			t.Errorf("%s: body %q, want %q", w.preset, m.Body, w.body)
		}
	}

	// Eventuate's consumer parses the body into MessageImpl: a String
	// payload and a Map<String, String> of headers.
	var ev struct {
		Payload *string           `json:"payload"`
		Headers map[string]string `json:"headers"`
	}
	dec := json.NewDecoder(strings.NewReader(msgs[4].Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ev); err != nil || dec.More() || ev.Payload == nil {
		t.Fatalf("eventuate: the body is not Eventuate's message JSON (%v): %s", err, msgs[4].Body)
	}
	if *ev.Payload != evPayload {
		t.Errorf("eventuate: payload %q, want %q", *ev.Payload, evPayload)
	}
	if len(ev.Headers) != len(evStrings) {
		t.Errorf("eventuate: envelope headers %v, want %v", ev.Headers, evStrings)
	}
	for k, v := range evStrings {
		if ev.Headers[k] != v {
			t.Errorf("eventuate: envelope header %s = %q, want %q", k, ev.Headers[k], v)
		}
	}
	dropinEventuallyCount(t, db, 1, "SELECT COUNT(*) FROM message WHERE published = 1")
}
