package router

import (
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// TestPatternEntryRoutes: a pattern entry's route serves a table it
// matched after the router was built (a tenant created while streaming),
// {schema} and {table} are the row's table, and the schema travels in
// x-relay-schema unless route.schema_header says otherwise.
func TestPatternEntryRoutes(t *testing.T) {
	entry := outboxtest.Preset(t, "debezium", "tenant_*", func(tb *outbox.Table) {
		tb.Route.Exchange = "events.{schema}"
		tb.Route.RoutingKey = "{table}.{type}"
		tb.Route.PartitionKey = "{schema}:{aggregateid}"
	})
	r, err := New([]*outbox.Table{entry})
	if err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"tenant_1", "tenant_42"} {
		tb := entry.Matched(schema, entry.Name)
		m, err := r.Route(&outbox.Row{Table: tb, ID: "1", Values: map[string]any{"id": "1", "aggregatetype": "order",
			"aggregateid": "a-1", "type": "created", "payload": []byte("{}")}})
		if err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
		if want := "events." + schema; m.Exchange != want {
			t.Errorf("exchange %q, want %q", m.Exchange, want)
		}
		if want := entry.Name + ".created"; m.RoutingKey != want {
			t.Errorf("routing key %q, want %q", m.RoutingKey, want)
		}
		if want := schema + ":a-1"; m.PartitionKey != want || !m.Keyed {
			t.Errorf("partition key %q (keyed %v), want %q: lanes hash by schema and key", m.PartitionKey, m.Keyed, want)
		}
		if got := m.Publishing.Headers[outbox.DefaultSchemaHeader]; got != schema {
			t.Errorf("%s header = %v, want %q", outbox.DefaultSchemaHeader, got, schema)
		}
	}
	if cols := RouteColumns(entry); len(cols) != 1 || cols[0] != "type" {
		t.Errorf("RouteColumns = %v: {schema} and {table} are not columns", cols)
	}

	entry.Route.SchemaHeader = "-"
	plain := outboxtest.Preset(t, "debezium", "app", nil)
	r, _ = New([]*outbox.Table{entry, plain})
	for _, tb := range []*outbox.Table{entry.Matched("tenant_1", "outbox"), plain} {
		m, err := r.Route(&outbox.Row{Table: tb, ID: "1", Values: map[string]any{"id": "1", "aggregatetype": "order",
			"aggregateid": "a-1", "type": "created", "payload": []byte("{}")}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := m.Publishing.Headers[outbox.DefaultSchemaHeader]; ok {
			t.Errorf("%s: a schema header with schema_header \"-\" or on an entry naming one table", tb.FullName())
		}
	}
}
