package router

// Eventuate Tram's message envelope (eventuate.envelope). Eventuate's CDC does
// not publish the payload column: it publishes MessageWithDestination.toJson(),
// {"payload": <payload>, "headers": <headers>}, and its consumers parse the body
// into io.eventuate.tram.messaging.common.MessageImpl (a String payload and a
// Map<String, String> of headers). The headers come from the row's headers
// column; the CDC adds ID when the column has none.
// https://github.com/eventuate-foundation/eventuate-cdc/blob/master/eventuate-tram-cdc-connector/src/main/java/io/eventuate/tram/cdc/connector/MessageWithDestination.java
// https://github.com/eventuate-foundation/eventuate-cdc/blob/master/eventuate-tram-cdc-connector/src/main/java/io/eventuate/tram/cdc/connector/BinlogEntryToMessageConverter.java

import (
	"bytes"
	"encoding/json"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// eventuateID is the envelope header that holds the message id
// (io.eventuate.tram.messaging.common.Message.ID).
const eventuateID = "ID"

// eventuateMessage is Eventuate's message JSON, in the CDC's key order.
type eventuateMessage struct {
	Payload string            `json:"payload"`
	Headers map[string]string `json:"headers"`
}

// eventuateEnvelope wraps the payload in Eventuate's message JSON.
func eventuateEnvelope(row *outbox.Row, msgID string, payload []byte) []byte {
	m := eventuateMessage{Payload: string(payload), Headers: eventuateHeaders(row)}
	if _, ok := m.Headers[eventuateID]; !ok {
		m.Headers[eventuateID] = msgID
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// As Jackson writes it: no \u003c for '<' and the like (both are valid
	// JSON; this keeps a payload's text recognisable in the body).
	enc.SetEscapeHTML(false)
	// A struct of a string and a map of strings always encodes.
	_ = enc.Encode(m)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// eventuateHeaders are the headers of columns.headers as the AMQP headers
// get them (a JSON object column expanded with route.expand_headers, NULL
// left out), every value as a string: Eventuate's headers are a
// Map<String, String>, which a JSON number or object would not fit.
// Strings stay as they are; numbers, booleans, objects and arrays become
// their compact JSON text; null is left out.
func eventuateHeaders(row *outbox.Row) map[string]string {
	t := row.Table
	h := map[string]string{}
	for _, col := range t.Columns.Headers {
		v, ok := row.Values[col]
		if !ok || v == nil {
			continue
		}
		if t.Route.ExpandHeaders {
			if obj, ok := jsonObject(v); ok {
				for k, val := range obj {
					if s, ok := jsonText(val); ok {
						h[k] = s
					}
				}
				continue
			}
		}
		h[col] = colval.ValueStringIn(v, t.Location())
	}
	return h
}

// jsonText is a JSON value as a header string: a string's content, null as
// no value, anything else as its compact JSON text.
func jsonText(val json.RawMessage) (string, bool) {
	switch val[0] {
	case '"':
		var s string
		if json.Unmarshal(val, &s) != nil {
			return "", false
		}
		return s, true
	case 'n':
		return "", false
	}
	var buf bytes.Buffer
	if json.Compact(&buf, val) != nil {
		return "", false
	}
	return buf.String(), true
}
