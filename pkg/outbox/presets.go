package outbox

import (
	"fmt"
	"sort"
)

// Presets are the outbox schemas the relay takes as they are. Each has its DDL
// in schema/ and is overridable field by field from the config.
var Presets = map[string]Table{
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
		Route: Route{Exchange: "{exchange}", RoutingKey: "{routing_key}"},
	},
	"local-message": {
		Name: "local_message",
		Columns: Columns{
			ID: "id", MessageID: "biz_id", Exchange: "exchange", RoutingKey: "routing_key",
			Payload: "message_body", Status: "status", RetryCount: "retry_count",
			NextRetryTime: "next_retry_time", CreatedAt: "created_at", UpdatedAt: "updated_at",
			Headers: []string{"biz_type"},
		},
		Statuses: Statuses{Pending: "0", Sent: "1", Failed: "2", Publishable: []string{"0"}, Numeric: true},
		Route:    Route{Exchange: "{exchange}", RoutingKey: "{routing_key}"},
		// local_message has no max retry column.
		MaxRetries: 5,
	},
	"message-record": {
		Name: "t_message_record",
		Columns: Columns{
			ID: "id", MessageID: "message_id", Payload: "message_body", Status: "status",
			RetryCount: "retry_count", Error: "error_message", CreatedAt: "create_time",
			UpdatedAt: "update_time", Headers: []string{"topic", "tag"},
		},
		Statuses:   Statuses{Pending: "PENDING", Sent: "SENT", Failed: "FAILED", Publishable: []string{"PENDING"}},
		Route:      Route{Exchange: "{topic}", RoutingKey: "{tag}"},
		MaxRetries: 5,
	},
	"debezium": {
		Name: "outbox",
		Columns: Columns{
			ID: "id", MessageID: "id", Payload: "payload",
			Headers: []string{"aggregatetype", "aggregateid", "type"},
		},
		// Debezium outbox rows have no status: every insert is published, and
		// routing is by aggregate type (one exchange per aggregate by default).
		Route: Route{Exchange: "{aggregatetype}", RoutingKey: "{type}", ContentType: "application/json"},
	},
	"eventuate": {
		Name: "message",
		Columns: Columns{
			ID: "id", MessageID: "id", Payload: "payload", Status: "published",
			CreatedAt: "creation_time", Headers: []string{"headers"},
		},
		Statuses: Statuses{Pending: "0", Sent: "1", Publishable: []string{"0"}, Numeric: true},
		Route:    Route{Exchange: "{destination}", RoutingKey: "{destination}"},
	},
}

// PresetNames lists the presets, sorted, for error messages.
func PresetNames() []string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns a copy of the named preset.
func Preset(name string) (Table, error) {
	p, ok := Presets[name]
	if !ok {
		return Table{}, fmt.Errorf("unknown preset %q (known: %v)", name, PresetNames())
	}
	p.Preset = name
	p.Columns.Headers = append([]string(nil), p.Columns.Headers...)
	p.Statuses.Publishable = append([]string(nil), p.Statuses.Publishable...)
	return p, nil
}
