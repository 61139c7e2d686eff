package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// servers is the part of a test config every test shares; base adds the
// broker.
const servers = `name: test-relay
source: {host: 127.0.0.1, port: 3308, user: relay}
primary: {host: 127.0.0.1, port: 3307, user: relay}
`

const base = servers + `broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}
`

func parse(t *testing.T, yaml string, env map[string]string) (*Config, error) {
	t.Helper()
	return Parse([]byte(yaml), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

func mustParse(t *testing.T, yaml string) *Config {
	t.Helper()
	c, err := parse(t, yaml, nil)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}

// A preset is applied, then the table's own fields override it one by one:
// everything not mentioned stays the preset's.
func TestPresetOverriddenFieldByField(t *testing.T) {
	c := mustParse(t, base+`tables:
  - preset: producer-message
    schema: shop
    name: outbox_v2
    columns: {payload: body, version: ""}
    statuses: {publishable: [NEW]}
    route: {routing_key: "{exchange}.{status}", time_zone: Asia/Shanghai}
    max_retries: 9
`)
	tb := c.Tables[0]
	if tb.Schema != "shop" || tb.Name != "outbox_v2" || tb.Preset != "producer-message" {
		t.Fatalf("table %s preset %s", tb.FullName(), tb.Preset)
	}
	if tb.Columns.Payload != "body" || tb.Columns.Version != "" {
		t.Fatalf("overridden columns: payload %q version %q", tb.Columns.Payload, tb.Columns.Version)
	}
	// Untouched columns keep the preset's names.
	if tb.Columns.MessageID != "message_id" || tb.Columns.NextRetryTime != "next_retry_time" || tb.Columns.Status != "status" {
		t.Fatalf("preset columns lost: %+v", tb.Columns)
	}
	if len(tb.Statuses.Publishable) != 1 || tb.Statuses.Publishable[0] != "NEW" || tb.Statuses.Sent != "SENT" {
		t.Fatalf("statuses %+v", tb.Statuses)
	}
	ex, rk := tb.RouteTemplates()
	if ex != "{exchange}" || rk != "{exchange}.{status}" {
		t.Fatalf("route %q %q", ex, rk)
	}
	if tb.Location().String() != "Asia/Shanghai" || tb.MaxRetries != 9 {
		t.Fatalf("zone %s max retries %d", tb.Location(), tb.MaxRetries)
	}
}

func TestEveryPresetParses(t *testing.T) {
	for _, p := range []string{"producer-message", "local-message", "message-record", "debezium", "eventuate"} {
		c := mustParse(t, base+fmt.Sprintf("tables:\n  - {preset: %s, schema: app}\n", p))
		if c.Tables[0].Preset != p || c.Tables[0].Name == "" || c.Tables[0].MaxRetries == 0 {
			t.Fatalf("%s: %+v", p, c.Tables[0])
		}
	}
}

// A custom mapping with no preset at all, and several tables in two
// databases.
func TestCustomAndSeveralTables(t *testing.T) {
	c := mustParse(t, base+`tables:
  - schema: billing
    name: outbox_events
    columns: {id: event_id, message_id: event_uuid, payload: data, status: state, headers: [tenant]}
    statuses: {pending: "0", sent: "1", failed: "9", publishable: ["0"], numeric: true}
    route: {exchange: billing, routing_key: "invoice.{kind}", expand_payload: true}
  - {preset: local-message, schema: shop}
  - {preset: eventuate, schema: eventuate}
`)
	if len(c.Tables) != 3 {
		t.Fatalf("%d tables", len(c.Tables))
	}
	tb := c.Tables[0]
	if tb.Columns.ID != "event_id" || !tb.Statuses.Numeric || !tb.Route.ExpandPayload || tb.Preset != "" {
		t.Fatalf("custom table %+v", tb)
	}
	if !c.Tables[2].Route.ExpandHeaders || c.Tables[2].CreatedAtEpoch != "ms" {
		t.Fatalf("eventuate preset %+v", c.Tables[2])
	}
}

// Overriding a preset's exchange map in one table must not leak into the
// preset or into another table.
func TestExchangeMapDoesNotLeak(t *testing.T) {
	c := mustParse(t, base+`tables:
  - {preset: debezium, schema: a, route: {exchange_map_column: aggregatetype, exchange_map: {Order: ex.orders}}}
  - {preset: debezium, schema: b}
`)
	if len(c.Tables[1].Route.ExchangeMap) != 0 {
		t.Fatalf("second table got the first one's map: %v", c.Tables[1].Route.ExchangeMap)
	}
}

func TestEnvExpansion(t *testing.T) {
	c, err := parse(t, base+"tables:\n  - {preset: producer-message, schema: \"${DB_NAME}\", name: \"${TABLE:-producer_message}\", columns: {version: ver$1}}\n",
		map[string]string{"DB_NAME": "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Tables[0].Schema != "shop" || c.Tables[0].Name != "producer_message" || c.Tables[0].Columns.Version != "ver$1" {
		t.Fatalf("%+v", c.Tables[0])
	}
	_, err = parse(t, base+"tables:\n  - {preset: producer-message, schema: \"${NOPE}\"}\n", nil)
	if err == nil || !strings.Contains(err.Error(), "NOPE") {
		t.Fatalf("unset variable: %v", err)
	}
}

// Every invalid config is refused before connecting, with the field named.
func TestErrorsNameTheField(t *testing.T) {
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"unknown top-level key", "tables:\n  - {preset: producer-message, schema: a}\nbrokr: {url: x}\n", "brokr: unknown key (line"},
		{"unknown nested key", "relay: {batch_sise: 3}\ntables:\n  - {preset: producer-message, schema: a}\n", "relay.batch_sise: unknown key"},
		{"unknown table key", "tables:\n  - {preset: producer-message, schema: a, shema: b}\n", "tables[0].shema: unknown key"},
		{"unknown column key", "tables:\n  - preset: producer-message\n    schema: a\n    columns:\n      payload_col: x\n", "tables[0].columns.payload_col: unknown key (line 9"},
		{"unknown statuses key", "tables:\n  - {preset: local-message, schema: a, statuses: {done: 1}}\n", "tables[0].statuses.done: unknown key"},
		{"unknown key in the second table", "tables:\n  - {preset: local-message, schema: a}\n  - {preset: debezium, schema: a, route: {exchnage: x}}\n", "tables[1].route.exchnage: unknown key"},
		{"unknown preset", "tables:\n  - {preset: outbox-pattern, schema: a}\n", "tables[0].preset: unknown preset \"outbox-pattern\""},
		{"bad schema identifier", "tables:\n  - {preset: producer-message, schema: \"a;b\"}\n", "tables[0].schema"},
		{"bad table identifier", "tables:\n  - {preset: producer-message, schema: a, name: \"x y\"}\n", "tables[0].name"},
		{"bad column identifier", "tables:\n  - {preset: producer-message, schema: a, columns: {status: \"st`atus\"}}\n", "tables[0].columns.status"},
		{"bad header identifier", "tables:\n  - {preset: producer-message, schema: a, columns: {headers: [ok, \"no-no\"]}}\n", "tables[0].columns.headers[1]"},
		{"bad template placeholder", "tables:\n  - {preset: producer-message, schema: a, route: {routing_key: \"{a.b}\"}}\n", "tables[0].route.routing_key"},
		{"bad exchange map column", "tables:\n  - {preset: debezium, schema: a, route: {exchange_map_column: \"a-b\", exchange_map: {x: y}}}\n", "tables[0].route.exchange_map_column"},
		{"numeric status not a number", "tables:\n  - {preset: local-message, schema: a, statuses: {sent: SENT}}\n", "tables[0].statuses.sent"},
		{"status value injection", "tables:\n  - {preset: producer-message, schema: a, statuses: {sent: \"SENT' OR 1=1 --\"}}\n", "tables[0].statuses.sent"},
		{"bad time zone", "tables:\n  - {preset: producer-message, schema: a, route: {time_zone: Moon/Base}}\n", "tables[0].route.time_zone"},
		{"missing schema", "tables:\n  - {preset: producer-message}\n", "tables[0].schema: required"},
		{"duplicate table", "tables:\n  - {preset: producer-message, schema: a}\n  - {preset: producer-message, schema: a}\n", "tables[1]: table a.producer_message is already configured"},
		{"no tables", "", "tables: at least one"},
		{"no payload without preset", "tables:\n  - {schema: a, name: b, columns: {id: id}, route: {exchange: x}}\n", "tables[0].columns.payload: required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parse(t, base+c.yaml, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// All problems are reported at once, not the first one only.
func TestAllProblemsReported(t *testing.T) {
	_, err := parse(t, base+"tables:\n  - {preset: producer-message, schema: a, columns: {status: \"x y\"}, route: {time_zone: Nowhere}}\n", nil)
	if err == nil || !strings.Contains(err.Error(), "tables[0].columns.status") || !strings.Contains(err.Error(), "tables[0].route.time_zone") {
		t.Fatalf("error %v", err)
	}
	_, err = parse(t, base+"tables:\n  - {preset: producer-message, schema: a, colour: red, columns: {shade: x}}\n", nil)
	if err == nil || !strings.Contains(err.Error(), "tables[0].colour") || !strings.Contains(err.Error(), "tables[0].columns.shade") {
		t.Fatalf("error %v", err)
	}
}

// YAML anchors and merge keys are followed: shared mappings are checked too.
func TestMergeKeys(t *testing.T) {
	c := mustParse(t, base+`tables:
  - &t1 {preset: local-message, schema: shop}
  - <<: *t1
    schema: other
`)
	if c.Tables[1].Schema != "other" || c.Tables[1].Preset != "local-message" {
		t.Fatalf("%+v", c.Tables[1])
	}
	_, err := parse(t, base+"tables:\n  - &t1 {preset: local-message, schema: shop}\n  - <<: {schemma: x}\n    preset: debezium\n    schema: b\n", nil)
	if err == nil || !strings.Contains(err.Error(), "tables[1].schemma: unknown key") {
		t.Fatalf("merged unknown key: %v", err)
	}
}

// The config's own defaults fill the keys left out and keep the ones set.
func TestDefaults(t *testing.T) {
	tables := "tables:\n  - {preset: producer-message, schema: shop}\n"
	c := mustParse(t, `
source: {host: 127.0.0.1, user: relay}
primary: {host: 127.0.0.1, user: relay}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}
`+tables)
	keys := func(c *Config) []any {
		return []any{c.Name, c.Source.Port, c.Source.Flavor, c.Primary.Port, c.Primary.Flavor, c.Redis.Addr, c.Checkpoint.Key,
			c.Checkpoint.OutageWindow, c.Relay.Ordering, c.Relay.Lanes, c.Log.Level, c.Log.Format, c.Tables[0].MaxRetries}
	}
	got := keys(c)
	want := []any{"binlog-relay", 3306, "auto", 3306, "auto", "127.0.0.1:6379", "binlog-relay:binlog-relay:checkpoint",
		30 * time.Second, "relaxed", 1, "info", "json", 5}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: %v, want %v", got, want)
	}

	c = mustParse(t, `name: r1
source: {host: 127.0.0.1, port: 3308, user: relay, flavor: mariadb}
primary: {host: 127.0.0.1, port: 3307, user: relay, flavor: mysql}
broker: {url: "amqp://guest:guest@127.0.0.1:5672/"}
redis: {addr: "redis:6380"}
checkpoint: {key: ck, outage_window: 1s}
relay: {ordering: strict, lanes: 2}
log: {level: debug, format: console}
tables:
  - {preset: producer-message, schema: shop, max_retries: 2, route: {partition_key: routing_key}}
`)
	got = keys(c)
	want = []any{"r1", 3308, "mariadb", 3307, "mysql", "redis:6380", "ck", time.Second, "strict", 2, "debug", "console", 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("set keys: %v, want %v", got, want)
	}
}

// Two tables whose names differ only by case are two tables on a server
// with lower_case_table_names=0 (the Linux default): the config takes both,
// and a name on the command line finds each by its own spelling, or
// without case when it matches nothing as written.
func TestTablesDifferingByCaseAreTwoTables(t *testing.T) {
	c := mustParse(t, base+`tables:
  - {preset: producer-message, schema: shop, name: outbox}
  - {preset: producer-message, schema: shop, name: Outbox}
`)
	for name, want := range map[string]string{"shop.outbox": "shop.outbox", "Outbox": "shop.Outbox", "shop.Outbox": "shop.Outbox"} {
		got, err := FindTable(c.Tables, name)
		if err != nil || got.FullName() != want {
			t.Errorf("FindTable(%q) = %v, %v; want %s", name, got, err, want)
		}
	}
	if _, err := FindTable(c.Tables, "OUTBOX"); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("FindTable(OUTBOX): %v; want it ambiguous", err)
	}
}
