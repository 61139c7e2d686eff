package router

import (
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// preset is the preset's table in schema app, changed by change.
func preset(t *testing.T, name string, change func(*outbox.Table)) *outbox.Table {
	t.Helper()
	return outboxtest.Preset(t, name, "app", change)
}

func route(t *testing.T, tb *outbox.Table, values map[string]any) (*Message, error) {
	t.Helper()
	r, err := New([]*outbox.Table{tb}, WithAppID("relay-test"))
	if err != nil {
		t.Fatal(err)
	}
	row := &outbox.Row{Table: tb, Values: values, ID: values[tb.Columns.ID]}
	return r.Route(row)
}

func TestRouting(t *testing.T) {
	for _, c := range []struct {
		name                string
		table               *outbox.Table
		values              map[string]any
		exchange, rk, msgID string
		body                string
		headers             amqp.Table
	}{
		{
			name:  "seed: exchange and routing key columns",
			table: preset(t, "producer-message", nil),
			values: map[string]any{"id": uint64(7), "message_id": "m-7", "exchange": "orders", "routing_key": "order.created",
				"content": []byte(`{"a":1}`), "status": "PENDING"},
			exchange: "orders", rk: "order.created", msgID: "m-7", body: `{"a":1}`,
		},
		{
			name: "overriding columns.exchange moves the route",
			table: preset(t, "producer-message", func(p *outbox.Table) {
				p.Columns.Exchange, p.Columns.RoutingKey = "target", "key"
			}),
			values:   map[string]any{"id": uint64(1), "message_id": "m", "target": "t-ex", "key": "k", "content": "x"},
			exchange: "t-ex", rk: "k", msgID: "m", body: "x",
		},
		{
			name:  "local message: template over columns, numeric status",
			table: preset(t, "local-message", func(p *outbox.Table) { p.Route.RoutingKey = "{biz_type}.{status}" }),
			values: map[string]any{"id": uint64(3), "biz_id": "B-3", "biz_type": "refund", "exchange": "pay",
				"message_body": "{}", "status": int8(0)},
			exchange: "pay", rk: "refund.0", msgID: "3", body: "{}", headers: amqp.Table{"biz_id": "B-3", "biz_type": "refund"},
		},
		{
			name:  "message record: topic and tag",
			table: preset(t, "message-record", nil),
			values: map[string]any{"id": uint64(1), "message_id": "r1", "topic": "shop", "tag": "TagA",
				"message_body": []byte("b"), "status": "PENDING"},
			exchange: "shop", rk: "TagA", msgID: "r1", body: "b", headers: amqp.Table{"topic": "shop", "tag": "TagA"},
		},
		{
			name: "debezium: exchange map by aggregate type",
			table: preset(t, "debezium", func(p *outbox.Table) {
				p.Route.ExchangeMapColumn = "aggregatetype"
				p.Route.ExchangeMap = map[string]string{"Order": "ex.orders"}
			}),
			values: map[string]any{"id": "6f1c-uuid", "aggregatetype": "Order", "aggregateid": "o-1", "type": "OrderCreated",
				"payload": []byte(`{"x":1}`)},
			exchange: "ex.orders", rk: "OrderCreated", msgID: "6f1c-uuid", body: `{"x":1}`,
			headers: amqp.Table{"id": "6f1c-uuid", "aggregatetype": "Order", "aggregateid": "o-1", "type": "OrderCreated"},
		},
		{
			name: "debezium: unmapped aggregate falls back to the template",
			table: preset(t, "debezium", func(p *outbox.Table) {
				p.Route.ExchangeMapColumn = "aggregatetype"
				p.Route.ExchangeMap = map[string]string{"Order": "ex.orders"}
			}),
			values:   map[string]any{"id": "u2", "aggregatetype": "Customer", "aggregateid": "c", "type": "T", "payload": "{}"},
			exchange: "Customer", rk: "T", msgID: "u2", body: "{}",
			headers: amqp.Table{"id": "u2", "aggregatetype": "Customer", "aggregateid": "c", "type": "T"},
		},
		{
			name:  "eventuate: headers JSON expanded, string id",
			table: preset(t, "eventuate", func(p *outbox.Table) { p.Eventuate.Envelope = false }),
			values: map[string]any{"id": "0000018c-1", "destination": []byte("orders"), "published": int16(0),
				"headers": []byte(`{"ID":"0000018c-1","PARTITION_ID":"2","n":3,"f":1.5,"b":true,"z":null,"o":{"k": [1, 2]}}`),
				"payload": []byte(`{"e":1}`)},
			exchange: "orders", rk: "orders", msgID: "0000018c-1", body: `{"e":1}`,
			headers: amqp.Table{"ID": "0000018c-1", "PARTITION_ID": "2", "n": int64(3), "f": 1.5, "b": true, "o": `{"k":[1,2]}`},
		},
		{
			name:  "eventuate: headers that are not an object are copied as text",
			table: preset(t, "eventuate", func(p *outbox.Table) { p.Eventuate.Envelope = false }),
			values: map[string]any{"id": "e2", "destination": "d", "headers": []byte(`not json`),
				"payload": []byte(`{}`)},
			exchange: "d", rk: "d", msgID: "e2", body: `{}`, headers: amqp.Table{"headers": "not json"},
		},
		{
			name: "fixed exchange, no message id column: schema.table:id",
			table: &outbox.Table{Schema: "app", Name: "ob", Columns: Columns{ID: "id", Payload: "p"},
				Route: outbox.Route{Exchange: "events", RoutingKey: "all"}},
			values:   map[string]any{"id": uint64(18446744073709551615), "p": []byte{0, 0xff, 0x80}},
			exchange: "events", rk: "all", msgID: "app.ob:18446744073709551615", body: "\x00\xff\x80",
		},
		{
			// t_message_record.tag is DEFAULT NULL: a routing key that is
			// just that column publishes with the empty key.
			name:  "message record: NULL tag is the empty routing key",
			table: preset(t, "message-record", nil),
			values: map[string]any{"id": uint64(2), "message_id": "r2", "topic": "shop", "tag": nil,
				"message_body": []byte("b"), "status": "PENDING"},
			exchange: "shop", rk: "", msgID: "r2", body: "b", headers: amqp.Table{"topic": "shop"},
		},
		{
			name: "NULL header columns are left out",
			table: &outbox.Table{Schema: "app", Name: "ob", Columns: Columns{ID: "id", Payload: "p", Headers: []string{"a", "b"}},
				Route: outbox.Route{Exchange: "events"}},
			values:   map[string]any{"id": int64(1), "p": "", "a": nil, "b": "set"},
			exchange: "events", rk: "", msgID: "app.ob:1", body: "", headers: amqp.Table{"b": "set"},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := route(t, c.table, c.values)
			if err != nil {
				t.Fatal(err)
			}
			if m.Exchange != c.exchange || m.RoutingKey != c.rk || m.Publishing.MessageId != c.msgID || string(m.Publishing.Body) != c.body {
				t.Fatalf("got %s/%s id %s body %q, want %s/%s id %s body %q", m.Exchange, m.RoutingKey, m.Publishing.MessageId,
					m.Publishing.Body, c.exchange, c.rk, c.msgID, c.body)
			}
			if m.Publishing.DeliveryMode != amqp.Persistent || m.Publishing.AppId != "relay-test" {
				t.Fatalf("properties: %+v", m.Publishing)
			}
			if len(m.Publishing.Headers) != len(c.headers) {
				t.Fatalf("headers %v, want %v", m.Publishing.Headers, c.headers)
			}
			for k, v := range c.headers {
				if m.Publishing.Headers[k] != v {
					t.Fatalf("header %s = %#v, want %#v (all %v)", k, m.Publishing.Headers[k], v, m.Publishing.Headers)
				}
			}
			if err := m.Publishing.Headers.Validate(); err != nil {
				t.Fatalf("headers the broker would refuse: %v", err)
			}
		})
	}
}

// Columns is a shorthand for the table literals above.
type Columns = outbox.Columns

func TestNoRoute(t *testing.T) {
	for _, c := range []struct {
		name   string
		table  *outbox.Table
		values map[string]any
		want   string
	}{
		{"NULL exchange column", preset(t, "producer-message", nil),
			map[string]any{"id": uint64(1), "message_id": "m", "exchange": nil, "routing_key": "k", "content": "x"}, `exchange column "exchange"`},
		{"NULL routing key column", preset(t, "local-message", func(p *outbox.Table) { p.Route.RoutingKey = "{biz_type}.x" }),
			map[string]any{"id": uint64(1), "biz_id": "b", "exchange": "e", "biz_type": nil, "message_body": "x"}, `routing key column "biz_type"`},
		{"NULL message id column", preset(t, "producer-message", nil),
			map[string]any{"id": uint64(1), "message_id": nil, "exchange": "e", "routing_key": "k", "content": "x"}, `message id column "message_id" is NULL`},
		{"NULL column in a longer routing key template", preset(t, "message-record", func(p *outbox.Table) { p.Route.RoutingKey = "rec.{tag}" }),
			map[string]any{"id": uint64(1), "message_id": "m", "topic": "e", "tag": nil, "message_body": "x"}, `routing key column "tag"`},
		{"empty exchange", preset(t, "producer-message", nil),
			map[string]any{"id": uint64(1), "message_id": "m", "exchange": "", "routing_key": "k", "content": "x"}, "the exchange is empty"},
		{"exchange map miss without template", &outbox.Table{Schema: "a", Name: "b", Columns: Columns{ID: "id", Payload: "p"},
			Route: outbox.Route{ExchangeMapColumn: "t", ExchangeMap: map[string]string{"A": "a"}}},
			map[string]any{"id": 1, "t": "B", "p": "x"}, `t="B" has no entry`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := route(t, c.table, c.values)
			if !errors.Is(err, ErrNoRoute) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want ErrNoRoute with %q", err, c.want)
			}
		})
	}
}

func TestExpandPayload(t *testing.T) {
	tb := &outbox.Table{Schema: "a", Name: "b", Columns: Columns{ID: "id", Payload: "p"}, Route: outbox.Route{Exchange: "e"}}
	for _, c := range []struct {
		in, off, on string
	}{
		{`"{\"a\":1,\"s\":\"😀\"}"`, `"{\"a\":1,\"s\":\"😀\"}"`, `{"a":1,"s":"😀"}`},
		{` "\u4e2d" `, ` "\u4e2d" `, `中`},
		{`{"a":1}`, `{"a":1}`, `{"a":1}`},
		{`"broken`, `"broken`, `"broken`},
		{``, ``, ``},
		{"\x00\xff", "\x00\xff", "\x00\xff"},
	} {
		tb.Route.ExpandPayload = false
		m, err := route(t, tb, map[string]any{"id": 1, "p": []byte(c.in)})
		if err != nil || string(m.Publishing.Body) != c.off {
			t.Fatalf("off: %q -> %q (%v)", c.in, m.Publishing.Body, err)
		}
		tb.Route.ExpandPayload = true
		m, err = route(t, tb, map[string]any{"id": 1, "p": []byte(c.in)})
		if err != nil || string(m.Publishing.Body) != c.on {
			t.Fatalf("on: %q -> %q, want %q (%v)", c.in, m.Publishing.Body, c.on, err)
		}
	}
}

// Times in headers and templates are RFC 3339 in route.time_zone.
func TestTimesInTheConfiguredZone(t *testing.T) {
	tb := &outbox.Table{Schema: "a", Name: "b", Columns: Columns{ID: "id", Payload: "p", Headers: []string{"created"}},
		Route: outbox.Route{Exchange: "e", RoutingKey: "day.{created}"}}
	// The binlog reader hands a DATETIME over as a time in the table's
	// zone; a TIMESTAMP as an instant.
	at := time.Date(2024, 2, 29, 15, 59, 58, 123000000, time.UTC)
	for _, c := range []struct{ zone, want string }{
		{"", "2024-02-29T15:59:58.123Z"},
		{"UTC", "2024-02-29T15:59:58.123Z"},
		{"Asia/Shanghai", "2024-02-29T23:59:58.123+08:00"},
		{"America/New_York", "2024-02-29T10:59:58.123-05:00"},
	} {
		tb.Route.TimeZone = c.zone
		if err := tb.Validate("t"); err != nil {
			t.Fatal(err)
		}
		m, err := route(t, tb, map[string]any{"id": 1, "p": "x", "created": at})
		if err != nil {
			t.Fatal(err)
		}
		if m.Publishing.Headers["created"] != c.want || m.RoutingKey != "day."+c.want {
			t.Fatalf("zone %q: header %v, routing key %s, want %s", c.zone, m.Publishing.Headers["created"], m.RoutingKey, c.want)
		}
	}
}

func TestMessageID(t *testing.T) {
	tb := preset(t, "producer-message", nil)
	if got := MessageID(&outbox.Row{Table: tb, ID: uint64(5), Values: map[string]any{"message_id": []byte("abc")}}); got != "abc" {
		t.Fatal(got)
	}
	// A NULL message id column falls back to the row's identity.
	if got := MessageID(&outbox.Row{Table: tb, ID: uint64(5), Values: map[string]any{"message_id": nil}}); got != "app.producer_message:5" {
		t.Fatal(got)
	}
}

func TestUnconfiguredTable(t *testing.T) {
	r, err := New(nil, WithAppID("x"))
	if err != nil {
		t.Fatal(err)
	}
	tb := preset(t, "debezium", nil)
	if _, err := r.Route(&outbox.Row{Table: tb, Values: map[string]any{}}); !errors.Is(err, ErrNoRoute) {
		t.Fatalf("error %v", err)
	}
}

// The partition key renders like a route template: a bare column or a
// template, times in the table's zone; a NULL column leaves the row
// without a key (and without the key header).
func TestPartitionKey(t *testing.T) {
	lm := func(key, header string) *outbox.Table {
		return preset(t, "local-message", func(p *outbox.Table) { p.Route.PartitionKey, p.Route.PartitionHeader = key, header })
	}
	row := func(bizID any) map[string]any {
		return map[string]any{"id": uint64(1), "biz_id": bizID, "biz_type": "order", "exchange": "ex", "routing_key": "rk",
			"message_body": []byte("{}"), "status": int8(0)}
	}
	for _, c := range []struct {
		name   string
		table  *outbox.Table
		values map[string]any
		key    string
		keyed  bool
		header any
	}{
		{"a column", lm("biz_id", ""), row("o-1"), "o-1", true, nil},
		{"a template, into a header", lm("{biz_type}:{biz_id}", "x-partition-key"), row("o-2"), "order:o-2", true, "order:o-2"},
		{"a number", lm("id", ""), row("o-3"), "1", true, nil},
		{"NULL: no key, no header", lm("{biz_type}:{biz_id}", "x-partition-key"), row(nil), "", false, nil},
		{"no partition key", lm("", ""), row("o-4"), "", false, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := route(t, c.table, c.values)
			if err != nil {
				t.Fatal(err)
			}
			if m.PartitionKey != c.key || m.Keyed != c.keyed {
				t.Errorf("key %q keyed %v, want %q %v", m.PartitionKey, m.Keyed, c.key, c.keyed)
			}
			if got := m.Publishing.Headers["x-partition-key"]; got != c.header {
				t.Errorf("header x-partition-key %#v, want %#v", got, c.header)
			}
			if m.Publishing.Headers["biz_type"] != "order" {
				t.Errorf("the table's own headers %v lost", m.Publishing.Headers)
			}
		})
	}
}

// Destination is Route's exchange and routing key, and reads only the
// columns RouteColumns names: a row read with just those (and the id)
// routes the same as the whole row.
func TestDestinationReadsRouteColumns(t *testing.T) {
	tb := preset(t, "debezium", func(tb *outbox.Table) {
		tb.Route.ExchangeMapColumn = "aggregatetype"
		tb.Route.ExchangeMap = map[string]string{"Order": "orders"}
	})
	if got := strings.Join(RouteColumns(tb), ","); got != "aggregatetype,type" {
		t.Fatalf("route columns %q", got)
	}
	full := map[string]any{"id": "u-1", "aggregatetype": "Order", "aggregateid": "7", "type": "OrderPaid", "payload": []byte(`{}`)}
	msg, err := route(t, tb, full)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := New([]*outbox.Table{tb}, WithAppID("relay-test"))
	slim := &outbox.Row{Table: tb, ID: "u-1", Values: map[string]any{"id": "u-1", "aggregatetype": "Order", "type": "OrderPaid"}}
	ex, rk, err := r.Destination(slim)
	if err != nil || ex != msg.Exchange || rk != msg.RoutingKey || ex != "orders" || rk != "OrderPaid" {
		t.Fatalf("destination %q %q %v, route %q %q", ex, rk, err, msg.Exchange, msg.RoutingKey)
	}
	if got := MessageID(slim); got != msg.Publishing.MessageId {
		t.Fatalf("message id %q, published as %q", got, msg.Publishing.MessageId)
	}
}
