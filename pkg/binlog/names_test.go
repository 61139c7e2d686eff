package binlog

import (
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The reader matches the binlog's schema and table names to the
// configured tables as the source compares names: exactly under
// lower_case_table_names=0 (`Outbox` and `outbox` are two tables), without
// case under 1 (the binlog names tables in lower case) and 2.
func TestTablesAreMatchedAsTheSourceComparesNames(t *testing.T) {
	for _, tc := range []struct {
		lctn       int
		configured string // schema.name
		binlog     string
		match      bool
	}{
		{0, "app.producer_message", "app.producer_message", true},
		{0, "app.producer_message", "app.Producer_Message", false},
		{0, "app.Producer_Message", "app.producer_message", false},
		{0, "app.Producer_Message", "app.Producer_Message", true},
		{0, "App.producer_message", "app.producer_message", false},
		{1, "app.Producer_Message", "app.producer_message", true},
		{1, "App.producer_message", "app.producer_message", true},
		{2, "app.Producer_Message", "app.producer_message", true},
		{2, "app.producer_message", "APP.PRODUCER_MESSAGE", true},
		{1, "app.producer_message", "app.producer_message_old", false},
	} {
		schema, name, _ := strings.Cut(tc.configured, ".")
		tb := &outbox.Table{Schema: schema, Name: name}
		r, err := New(Config{Host: "x", Port: 1, User: "u", Flavor: FlavorMySQL, LowerCaseTableNames: tc.lctn}, []*outbox.Table{tb})
		if err != nil {
			t.Fatal(err)
		}
		bs, bn, _ := strings.Cut(tc.binlog, ".")
		if got := r.outboxTable(bs, bn) == tb; got != tc.match {
			t.Errorf("lower_case_table_names=%d, configured %s, binlog names %s: matched %v, want %v", tc.lctn, tc.configured, tc.binlog, got, tc.match)
		}
	}
}

// Two configured tables that differ only by case are two tables where the
// source tells them apart, and one table configured twice where it does
// not: New refuses that.
func TestTablesDifferingByCaseAreOneTableWhereTheSourceFoldsNames(t *testing.T) {
	tables := []*outbox.Table{{Schema: "app", Name: "outbox"}, {Schema: "app", Name: "Outbox"}}
	cfg := Config{Host: "x", Port: 1, User: "u", Flavor: FlavorMySQL}
	if _, err := New(cfg, tables); err != nil {
		t.Fatalf("lower_case_table_names=0: %v", err)
	}
	cfg.LowerCaseTableNames = 1
	_, err := New(cfg, tables)
	if err == nil || !strings.Contains(err.Error(), "app.outbox and app.Outbox are one table") {
		t.Fatalf("lower_case_table_names=1: %v; want the two named as one table", err)
	}
	cfg.LowerCaseTableNames = 3
	if _, err := New(cfg, tables[:1]); err == nil || !strings.Contains(err.Error(), "Config.LowerCaseTableNames") {
		t.Fatalf("lower_case_table_names=3: %v; want Config.LowerCaseTableNames refused", err)
	}
}
