package config

import (
	"strings"
	"testing"
)

func TestLanesConfig(t *testing.T) {
	keyed := "  - {preset: producer-message, schema: shop, route: {partition_key: routing_key}}\n"
	unkeyed := "  - {preset: local-message, schema: shop}\n"
	for _, c := range []struct {
		name, relay, tables, err string
	}{
		{"default is one lane", "", unkeyed, ""},
		{"one lane needs no key", "relay: {lanes: 1}\n", unkeyed, ""},
		{"several lanes, every table keyed", "relay: {lanes: 4, ordering: strict}\n", keyed, ""},
		{"a template key", "relay: {lanes: 4}\n", "  - {preset: local-message, schema: shop, route: {partition_key: \"{biz_type}:{biz_id}\"}}\n", ""},
		{"a table without a key", "relay: {lanes: 4}\n", keyed + unkeyed,
			"tables[1].route.partition_key: required with relay.lanes: 4"},
		{"too many lanes", "relay: {lanes: 65}\n", keyed, "relay.lanes: 65 is not between 1 and 64"},
		{"negative", "relay: {lanes: -1}\n", keyed, "relay.lanes: -1 is not between 1 and 64"},
		{"a bad key template", "relay: {lanes: 2}\n", "  - {preset: local-message, schema: shop, route: {partition_key: \"{biz id}\"}}\n",
			"tables[0].route.partition_key: template placeholder {biz id}"},
		{"a header without a key", "", "  - {preset: local-message, schema: shop, route: {partition_header: x-key}}\n",
			"tables[0].route.partition_header: needs route.partition_key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parse(t, base+c.relay+"tables:\n"+c.tables, nil)
			switch {
			case c.err == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
				t.Fatalf("error %v, want %q", err, c.err)
			case c.err == "" && c.relay == "" && cfg.Relay.Lanes != 1:
				t.Fatalf("relay.lanes defaults to %d, want 1", cfg.Relay.Lanes)
			}
		})
	}
}

// The partition key's columns are mapped: the start-up check looks for
// them and the binlog path reads them.
func TestPartitionKeyColumnsAreRead(t *testing.T) {
	cfg := mustParse(t, base+"tables:\n  - {preset: local-message, schema: shop, route: {partition_key: \"{tenant}:{biz_id}\"}}\n")
	tb := cfg.Tables[0]
	if got := tb.MappedColumns()["route.partition_key {tenant}"]; got != "tenant" {
		t.Errorf("mapped columns %v lack the key's tenant column", tb.MappedColumns())
	}
	cols := strings.Join(tb.StreamColumns(), ",")
	for _, want := range []string{"tenant", "biz_id", "message_body"} {
		if !strings.Contains(","+cols+",", ","+want+",") {
			t.Errorf("the binlog path reads %s, not %s", cols, want)
		}
	}
	for _, not := range []string{"created_at", "updated_at", "next_retry_time"} {
		if strings.Contains(","+cols+",", ","+not+",") {
			t.Errorf("the binlog path reads %s, including bookkeeping column %s", cols, not)
		}
	}
}
