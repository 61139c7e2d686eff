package router

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// eventuateBody decodes a body as Eventuate's consumer does: into a String
// payload and a Map<String, String> of headers, nothing else.
func eventuateBody(t *testing.T, body []byte) (string, map[string]string) {
	t.Helper()
	var m struct {
		Payload *string           `json:"payload"`
		Headers map[string]string `json:"headers"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil || dec.More() {
		t.Fatalf("body is not Eventuate's message JSON (%v): %s", err, body)
	}
	if m.Payload == nil || m.Headers == nil {
		t.Fatalf("body lacks payload or headers: %s", body)
	}
	return *m.Payload, m.Headers
}

// The eventuate preset publishes Eventuate's message JSON: the payload column
// as a JSON string, byte for byte once decoded, and the headers column's
// object with every value a string.
func TestEventuateEnvelope(t *testing.T) {
	tb := preset(t, "eventuate", nil)
	if !tb.Eventuate.Envelope {
		t.Fatal("the eventuate preset must default to eventuate.envelope: true")
	}
	payload := `{"orderId":"o-1","note":"<b>Zoë & 佐藤</b> \"quoted\" 🚀","total":12.50}`
	headers := `{"ID":"0000018c-1","DESTINATION":"orders","PARTITION_ID":"o-1","DATE":"Tue, 4 Feb 2025 10:00:00 GMT",
		"event-aggregate-type":"net.chrisrichardson.Order","event-aggregate-id":"o-1","event-type":"net.chrisrichardson.OrderCreated",
		"n":3,"f":1.50,"b":true,"z":null,"o":{"k": [1, 2]}}`
	m, err := route(t, tb, map[string]any{"id": "0000018c-1", "destination": []byte("orders"), "published": int16(0),
		"headers": []byte(headers), "payload": []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	gotPayload, gotHeaders := eventuateBody(t, m.Publishing.Body)
	if gotPayload != payload {
		t.Errorf("payload %q, want %q", gotPayload, payload)
	}
	want := map[string]string{"ID": "0000018c-1", "DESTINATION": "orders", "PARTITION_ID": "o-1",
		"DATE": "Tue, 4 Feb 2025 10:00:00 GMT", "event-aggregate-type": "net.chrisrichardson.Order",
		"event-aggregate-id": "o-1", "event-type": "net.chrisrichardson.OrderCreated",
		"n": "3", "f": "1.50", "b": "true", "o": `{"k":[1,2]}`}
	if len(gotHeaders) != len(want) {
		t.Errorf("headers %v, want %v", gotHeaders, want)
	}
	for k, v := range want {
		if gotHeaders[k] != v {
			t.Errorf("header %s = %q, want %q", k, gotHeaders[k], v)
		}
	}
	// Not HTML-escaped, as Jackson writes it.
	if !bytes.Contains(m.Publishing.Body, []byte(`<b>Zoë & 佐藤</b>`)) {
		t.Errorf("body escapes the payload's text: %s", m.Publishing.Body)
	}
	// The AMQP side is unchanged: the same message id, content type and
	// expanded headers as without the envelope.
	if m.Publishing.MessageId != "0000018c-1" || m.Publishing.ContentType != "application/json" ||
		m.Publishing.Headers["event-type"] != "net.chrisrichardson.OrderCreated" || m.Publishing.Headers["n"] != int64(3) {
		t.Errorf("properties %+v", m.Publishing)
	}
}

// The exact body docs/presets.md shows for its example row: payload first,
// then the headers sorted by name.
func TestEventuateEnvelopeExactBody(t *testing.T) {
	const id = "0000018c2f1a7b3e-0242ac1100020000"
	m, err := route(t, preset(t, "eventuate", nil), map[string]any{"id": id, "destination": "orders",
		"headers": `{"ID":"` + id + `","DESTINATION":"orders","PARTITION_ID":"o-17","event-type":"OrderCreated"}`,
		"payload": `{"orderId":"o-17"}`, "published": int16(0), "creation_time": int64(1738663200123)})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"payload":"{\"orderId\":\"o-17\"}","headers":{"DESTINATION":"orders","ID":"` + id +
		`","PARTITION_ID":"o-17","event-type":"OrderCreated"}}`
	if string(m.Publishing.Body) != want {
		t.Fatalf("body\n%s\nwant\n%s", m.Publishing.Body, want)
	}
}

// ID is Eventuate's message id: kept from the headers column when it has
// one, else the message id (Eventuate's CDC adds it the same way), so a
// consumer's getId() never fails. NULL or unparsable headers still make an
// envelope; text that is not an object is one header named after the column,
// as in the AMQP headers.
func TestEventuateEnvelopeID(t *testing.T) {
	for _, c := range []struct {
		name    string
		headers any
		want    map[string]string
	}{
		{"ID from the headers column", `{"ID":"from-headers","DESTINATION":"d"}`, map[string]string{"ID": "from-headers", "DESTINATION": "d"}},
		{"no ID: the message id", `{"DESTINATION":"d"}`, map[string]string{"ID": "row-id", "DESTINATION": "d"}},
		{"NULL headers", nil, map[string]string{"ID": "row-id"}},
		{"not an object", []byte(`not json`), map[string]string{"ID": "row-id", "headers": "not json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := route(t, preset(t, "eventuate", nil), map[string]any{"id": "row-id", "destination": "d",
				"headers": c.headers, "payload": []byte("plain text, not JSON")})
			if err != nil {
				t.Fatal(err)
			}
			payload, headers := eventuateBody(t, m.Publishing.Body)
			if payload != "plain text, not JSON" || len(headers) != len(c.want) {
				t.Fatalf("payload %q headers %v, want headers %v", payload, headers, c.want)
			}
			for k, v := range c.want {
				if headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, headers[k], v)
				}
			}
		})
	}
}

// envelope: false publishes the payload column alone; the envelope works on
// any table, after route.expand_payload has unwrapped the payload.
func TestEventuateEnvelopeOptions(t *testing.T) {
	values := map[string]any{"id": "e-1", "destination": "d", "headers": `{"ID":"e-1"}`, "payload": []byte(`"{\"a\":1}"`)}
	m, err := route(t, preset(t, "eventuate", func(p *outbox.Table) { p.Eventuate.Envelope = false }), values)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Publishing.Body) != `"{\"a\":1}"` {
		t.Errorf("envelope false: body %s, want the payload column as it is", m.Publishing.Body)
	}
	m, err = route(t, preset(t, "eventuate", func(p *outbox.Table) { p.Route.ExpandPayload = true }), values)
	if err != nil {
		t.Fatal(err)
	}
	if payload, _ := eventuateBody(t, m.Publishing.Body); payload != `{"a":1}` {
		t.Errorf("expand_payload then envelope: payload %q", payload)
	}
	// A table of its own with plain header columns: one header each.
	own := &outbox.Table{Schema: "app", Name: "ob", Columns: Columns{ID: "id", Payload: "p", Headers: []string{"tenant", "seq"}},
		Route: outbox.Route{Exchange: "events"}, Eventuate: outbox.Eventuate{Envelope: true}}
	m, err = route(t, own, map[string]any{"id": int64(9), "p": "x", "tenant": "acme", "seq": uint64(7)})
	if err != nil {
		t.Fatal(err)
	}
	if _, headers := eventuateBody(t, m.Publishing.Body); len(headers) != 3 || headers["ID"] != "app.ob:9" ||
		headers["tenant"] != "acme" || headers["seq"] != "7" {
		t.Errorf("own table: headers %v", headers)
	}
}

// Debezium's outbox event router puts the event id in the "id" header; the
// preset sends it as a string whatever the id column's type, beside the
// AMQP message id.
func TestDebeziumIDHeader(t *testing.T) {
	for _, id := range []any{"6f1c1d58-6b0e-4a57-9d7c-0a3c1b1e0001", []byte("6f1c1d58-6b0e-4a57-9d7c-0a3c1b1e0002"), uint64(42)} {
		m, err := route(t, preset(t, "debezium", nil), map[string]any{"id": id, "aggregatetype": "Order",
			"aggregateid": "o-1", "type": "OrderCreated", "payload": []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		h, ok := m.Publishing.Headers["id"].(string)
		if !ok || h != m.Publishing.MessageId || h == "" {
			t.Errorf("id %v: header id %#v (a string equal to the message id %q wanted)", id, m.Publishing.Headers["id"], m.Publishing.MessageId)
		}
		if string(m.Publishing.Body) != `{}` {
			t.Errorf("the debezium body is the payload alone: %s", m.Publishing.Body)
		}
	}
}
