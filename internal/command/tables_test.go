package command

import (
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func table(schema, name string, failed bool) *outbox.Table {
	t := &outbox.Table{Schema: schema, Name: name}
	if failed {
		t.Columns.Status, t.Statuses.Failed = "status", "FAILED"
	}
	return t
}

// requeue and replay pick the table named (schema.table or table, any
// case), or without --table the only candidate: for requeue the only table
// with a failed status, for replay the only table.
func TestCommandTable(t *testing.T) {
	shop, shopNoFail := table("shop", "outbox", true), table("shop", "events", false)
	billing := table("billing", "outbox", true)
	cases := []struct {
		name    string
		tables  []*outbox.Table
		table   string
		requeue string // the table requeue picks, or its error
		replay  string // the same for replay
	}{
		{"one table, none named", []*outbox.Table{shop}, "", "shop.outbox", "shop.outbox"},
		{"named in full, any case", []*outbox.Table{shop, billing}, "BILLING.Outbox", "billing.outbox", "billing.outbox"},
		{"named by table", []*outbox.Table{shop, shopNoFail}, "events", "shop.events", "shop.events"},
		{"none named, one with a failed status", []*outbox.Table{shop, shopNoFail}, "", "shop.outbox",
			"replay: several tables are configured; name one with --table (shop.outbox, shop.events)"},
		{"none named, none with a failed status", []*outbox.Table{shopNoFail}, "",
			"requeue: no configured table has a failed status", "shop.events"},
		{"none named, several with a failed status", []*outbox.Table{shop, billing}, "",
			"requeue: several tables have a failed status; name one with --table (shop.outbox, billing.outbox)",
			"replay: several tables are configured; name one with --table (shop.outbox, billing.outbox)"},
		{"ambiguous", []*outbox.Table{shop, billing}, "outbox",
			"requeue: --table outbox is ambiguous; use schema.table", "replay: --table outbox is ambiguous; use schema.table"},
		{"not configured", []*outbox.Table{shop, billing}, "shop.orders",
			"requeue: --table shop.orders is not configured (shop.outbox, billing.outbox)",
			"replay: --table shop.orders is not configured (shop.outbox, billing.outbox)"},
	}
	for _, c := range cases {
		e := Env{Cfg: &config.Config{Tables: c.tables}}
		for _, pick := range []struct {
			cmd  string
			f    func(string) (*outbox.Table, error)
			want string
		}{{"requeue", e.requeueTable, c.requeue}, {"replay", e.replayTable, c.replay}} {
			got, err := pick.f(c.table)
			var gotS string
			if err != nil {
				gotS = err.Error()
			} else {
				gotS = got.FullName()
			}
			if gotS != pick.want {
				t.Errorf("%s: %s --table %q: got %q, want %q", c.name, pick.cmd, c.table, gotS, pick.want)
			}
			if err != nil && !strings.HasPrefix(pick.want, pick.cmd+": ") {
				t.Errorf("%s: %s failed: %v", c.name, pick.cmd, err)
			}
		}
	}
}
