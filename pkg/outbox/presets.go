package outbox

import (
	"fmt"
	"maps"
	"sort"
)

// presets are the outbox schemas the relay takes as they are. Each has its DDL
// in schema/ and is overridable field by field from the config.
var presets = map[string]Table{
	// The seed's producer_message (schema/producer_message.sql). Its producers
	// insert SENDING as well as PENDING; both mean "publish me".
	"producer-message": {
		Name: "producer_message",
		Columns: Columns{
			ID: "id", MessageID: "message_id", Exchange: "exchange", RoutingKey: "routing_key",
			Payload: "content", Status: "status", RetryCount: "retry_count",
			MaxRetryCount: "max_retry_count", NextRetryTime: "next_retry_time", Error: "error_msg",
			CreatedAt: "create_time", UpdatedAt: "update_time", Version: "version",
		},
		Statuses: Statuses{Pending: "PENDING", Sending: "SENDING", Sent: "SENT", Failed: "FAILED",
			Publishable: []string{"PENDING", "SENDING"}},
	},
	// local_message (schema/local_message.sql): TINYINT status 0/1/2, no max
	// retry, error or version column. biz_id is the business object's id
	// (an order id), shared by every event of that object, so it cannot be
	// the message id consumers deduplicate on: the row id is, as the
	// design's own sender sets it. biz_id and biz_type travel as headers.
	"local-message": {
		Name: "local_message",
		Columns: Columns{
			ID: "id", MessageID: "id", Exchange: "exchange", RoutingKey: "routing_key",
			Payload: "message_body", Status: "status", RetryCount: "retry_count",
			NextRetryTime: "next_retry_time", CreatedAt: "created_at", UpdatedAt: "updated_at",
			Headers: []string{"biz_id", "biz_type"},
		},
		Statuses:   Statuses{Pending: "0", Sent: "1", Failed: "2", Publishable: []string{"0"}, Numeric: true},
		MaxRetries: 5,
	},
	// t_message_record (schema/message_record.sql): RocketMQ-style topic and
	// tag are the exchange and routing key (and are copied into headers).
	"message-record": {
		Name: "t_message_record",
		Columns: Columns{
			ID: "id", MessageID: "message_id", Exchange: "topic", RoutingKey: "tag",
			Payload: "message_body", Status: "status", RetryCount: "retry_count", Error: "error_message",
			CreatedAt: "create_time", UpdatedAt: "update_time", Headers: []string{"topic", "tag"},
		},
		Statuses:   Statuses{Pending: "PENDING", Sent: "SENT", Failed: "FAILED", Publishable: []string{"PENDING"}},
		MaxRetries: 5,
	},
	// Debezium's outbox (schema/debezium_outbox.sql). No status: every insert
	// is published and nothing is written back. Routed by aggregate type (one
	// exchange per aggregate; route.exchange_map renames them), event type as
	// the routing key.
	//
	// Debezium's outbox event router (io.debezium.transforms.outbox.EventRouter)
	// sets one header by default, "id", the event id (table.field.event.id,
	// default column id): EventRouterDelegate.apply does headers.add("id",
	// eventId, ...); every other column reaches a header only when
	// table.fields.additional.placement names it (empty by default).
	// Consumers written for it read the event id from that header, so the
	// preset sends it: an AMQP long string holding the id itself (the column
	// is a CHAR(36) UUID), as Debezium's documentation shows the header
	// ("id=4d47e190-..."). Debezium Server's RabbitMQ sink also sends its
	// headers as long strings, in the text its header converter writes.
	// https://github.com/debezium/debezium/blob/main/debezium-core/src/main/java/io/debezium/transforms/outbox/EventRouterDelegate.java
	// aggregatetype, aggregateid and type are the relay's own additions.
	"debezium": {
		Name: "outbox",
		Columns: Columns{
			ID: "id", MessageID: "id", Payload: "payload",
			Headers: []string{"id", "aggregatetype", "aggregateid", "type"},
		},
		Route: Route{Exchange: "{aggregatetype}", RoutingKey: "{type}", ContentType: "application/json"},
	},
	// Eventuate Tram's message table (schema/eventuate_message.sql): string
	// ids, published 0/1, a JSON object of headers expanded into AMQP
	// headers, creation_time in epoch milliseconds. The destination is both
	// exchange and routing key. The body is Eventuate's message JSON (see
	// Eventuate), which is what Eventuate's consumers parse.
	"eventuate": {
		Name: "message",
		Columns: Columns{
			ID: "id", MessageID: "id", Payload: "payload", Status: "published",
			CreatedAt: "creation_time", Headers: []string{"headers"},
		},
		Statuses:       Statuses{Pending: "0", Sent: "1", Publishable: []string{"0"}, Numeric: true},
		Route:          Route{Exchange: "{destination}", RoutingKey: "{destination}", ExpandHeaders: true},
		CreatedAtEpoch: "ms",
		Eventuate:      Eventuate{Envelope: true},
	},
}

// Eventuate is the table's eventuate: section: Eventuate Tram's message
// format, on by default in the eventuate preset.
type Eventuate struct {
	// Envelope makes the message body Eventuate Tram's message JSON, the
	// form Eventuate's CDC publishes and its consumers parse
	// (io.eventuate.tram.messaging.common.MessageImpl):
	//
	//	{"payload":"<the payload column, as a JSON string>","headers":{"ID":"...","DESTINATION":"...",...}}
	//
	// headers holds the headers the table maps from columns.headers (with
	// route.expand_headers, a JSON object column gives its keys), every
	// value as a string, and ID set to the message id when no header gives
	// one, as Eventuate's CDC sets it. False publishes the payload alone.
	Envelope bool `yaml:"envelope"`
}

// PresetNames lists the presets' names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns a copy of the named preset: a Table with its columns,
// statuses and route, and Name set to the table's usual name; set Schema
// (and Name if yours differs), then Validate.
func Preset(name string) (Table, error) {
	p, ok := presets[name]
	if !ok {
		return Table{}, fmt.Errorf("unknown preset %q (known: %v)", name, PresetNames())
	}
	p.Preset = name
	p.Columns.Headers = append([]string(nil), p.Columns.Headers...)
	p.Statuses.Publishable = append([]string(nil), p.Statuses.Publishable...)
	// yaml merges a config's route.exchange_map into an existing map: never
	// into the preset's own.
	p.Route.ExchangeMap = maps.Clone(p.Route.ExchangeMap)
	return p, nil
}
