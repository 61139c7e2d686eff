package outbox

import (
	"strings"
	"testing"
)

func validTable() Table {
	return Table{
		Schema: "app", Name: "outbox",
		Columns:  Columns{ID: "id", Payload: "body", Status: "state", Exchange: "ex"},
		Statuses: Statuses{Pending: "NEW", Sent: "DONE", Publishable: []string{"NEW"}},
	}
}

func TestValidateNamesTheField(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*Table)
		want   string // "" means valid
	}{
		{"valid", func(*Table) {}, ""},
		{"no schema", func(t *Table) { t.Schema = "" }, "tables[0].schema: required"},
		{"schema with a dash", func(t *Table) { t.Schema = "my-db" }, "tables[0].schema"},
		{"name with a backtick", func(t *Table) { t.Name = "out`box" }, "tables[0].name"},
		{"column with a space", func(t *Table) { t.Columns.RoutingKey = "routing key" }, "tables[0].columns.routing_key"},
		{"column with a quote", func(t *Table) { t.Columns.Version = "v'" }, "tables[0].columns.version"},
		{"dollar is fine", func(t *Table) { t.Columns.Version = "v$1" }, ""},
		{"header column", func(t *Table) { t.Columns.Headers = []string{"ok", "not-ok"} }, "tables[0].columns.headers[1]"},
		{"no id", func(t *Table) { t.Columns.ID = "" }, "tables[0].columns.id: required"},
		{"no payload", func(t *Table) { t.Columns.Payload = "" }, "tables[0].columns.payload: required"},
		{"status without sent", func(t *Table) { t.Statuses.Sent = "" }, "tables[0].statuses.sent: required"},
		{"status without publishable", func(t *Table) { t.Statuses.Publishable = nil }, "tables[0].statuses.publishable: required"},
		{"no status, no statuses needed", func(t *Table) { t.Columns.Status = ""; t.Statuses = Statuses{} }, ""},
		{"numeric status not a number", func(t *Table) { t.Statuses.Numeric = true }, "tables[0].statuses.pending: \"NEW\" is not a number"},
		{"numeric publishable injection", func(t *Table) {
			t.Statuses = Statuses{Pending: "0", Sent: "1", Publishable: []string{"0) OR (1=1"}, Numeric: true}
		}, "tables[0].statuses.publishable[0]"},
		{"numeric ok", func(t *Table) {
			t.Statuses = Statuses{Pending: "0", Sent: "1", Failed: "2", Publishable: []string{"0"}, Numeric: true}
		}, ""},
		{"status value with a quote", func(t *Table) { t.Statuses.Sent = "DONE'; --" }, "tables[0].statuses.sent"},
		{"status value with a backslash", func(t *Table) { t.Statuses.Publishable = []string{`NEW\`} }, "tables[0].statuses.publishable[0]"},
		{"empty publishable value", func(t *Table) { t.Statuses.Publishable = []string{"NEW", ""} }, "tables[0].statuses.publishable[1]: empty"},
		{"no exchange at all", func(t *Table) { t.Columns.Exchange = "" }, "tables[0].route.exchange"},
		{"fixed exchange", func(t *Table) { t.Columns.Exchange = ""; t.Route.Exchange = "events" }, ""},
		{"exchange map without column", func(t *Table) { t.Route.ExchangeMap = map[string]string{"a": "b"} }, "tables[0].route.exchange_map_column: required"},
		{"exchange map column bad", func(t *Table) {
			t.Route.ExchangeMap = map[string]string{"a": "b"}
			t.Route.ExchangeMapColumn = "a b"
		}, "tables[0].route.exchange_map_column"},
		{"bad template", func(t *Table) { t.Route.RoutingKey = "{biz-type}" }, "tables[0].route.routing_key"},
		{"unclosed template", func(t *Table) { t.Route.Exchange = "ex.{type" }, "tables[0].route.exchange: unclosed"},
		{"bad zone", func(t *Table) { t.Route.TimeZone = "Mars/Olympus" }, "tables[0].route.time_zone"},
		{"good zone", func(t *Table) { t.Route.TimeZone = "Asia/Shanghai" }, ""},
		{"negative retries", func(t *Table) { t.MaxRetries = -1 }, "tables[0].max_retries"},
		{"bad epoch", func(t *Table) { t.CreatedAtEpoch = "us" }, "tables[0].created_at_epoch"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := validTable()
			c.change(&tb)
			err := tb.Validate("tables[0]")
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestRouteTemplatesFollowColumns(t *testing.T) {
	tb := validTable()
	tb.Columns.RoutingKey = "rk"
	if ex, rk := tb.RouteTemplates(); ex != "{ex}" || rk != "{rk}" {
		t.Fatalf("from columns: %q %q", ex, rk)
	}
	tb.Route = Route{Exchange: "fixed", RoutingKey: "{kind}.{state}"}
	if ex, rk := tb.RouteTemplates(); ex != "fixed" || rk != "{kind}.{state}" {
		t.Fatalf("from route: %q %q", ex, rk)
	}
	tb.Columns.RoutingKey, tb.Route.RoutingKey = "", ""
	if _, rk := tb.RouteTemplates(); rk != "" {
		t.Fatalf("no routing key: %q", rk)
	}
}

func TestMappedColumns(t *testing.T) {
	tb := validTable()
	tb.Columns.Headers = []string{"h1"}
	tb.Route = Route{RoutingKey: "{kind}.x", ExchangeMapColumn: "agg", ExchangeMap: map[string]string{"A": "a"}}
	got := tb.MappedColumns()
	want := map[string]string{
		"columns.id": "id", "columns.payload": "body", "columns.status": "state", "columns.exchange": "ex",
		"columns.headers[0]": "h1", "route.exchange_map_column": "agg", "route.routing_key {kind}": "kind",
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

func TestIsPublishable(t *testing.T) {
	seed := Table{Columns: Columns{Status: "status"}, Statuses: Statuses{Publishable: []string{"PENDING", "SENDING"}}}
	local := Table{Columns: Columns{Status: "status"}, Statuses: Statuses{Publishable: []string{"0"}, Numeric: true}}
	none := Table{}
	for _, c := range []struct {
		t    *Table
		v    any
		want bool
	}{
		{&seed, "PENDING", true},
		{&seed, []byte("SENDING"), true},
		{&seed, "SENT", false},
		{&seed, "pending", false},
		{&seed, nil, false},
		{&local, int8(0), true},
		{&local, uint8(0), true},
		{&local, int16(1), false},
		{&local, int64(2), false},
		{&none, nil, true},
	} {
		if got := c.t.IsPublishable(c.v); got != c.want {
			t.Errorf("IsPublishable(%#v) with %v = %v", c.v, c.t.Statuses.Publishable, got)
		}
	}
}

// The binlog path reads the columns routing, headers and keys use, and
// leaves out the bookkeeping ones only the status writer and the sweeper
// read, unless something it publishes names them (ce-time reads created_at).
func TestStreamColumns(t *testing.T) {
	p, err := Preset("producer-message")
	if err != nil {
		t.Fatal(err)
	}
	p.Schema = "shop"
	cols := func() string { return strings.Join(p.StreamColumns(), ",") }
	if got := cols(); got != "content,exchange,id,max_retry_count,message_id,retry_count,routing_key,status" {
		t.Errorf("stream columns %s", got)
	}
	p.CloudEvents = CloudEvents{Enabled: true, Source: "/shop", Type: "{routing_key}"}
	p.Route.PartitionKey = "{exchange}:{version}"
	if got := cols(); !strings.Contains(got, "create_time") || !strings.Contains(got, "version") || strings.Contains(got, "update_time") {
		t.Errorf("with ce-time and a key over version, stream columns %s", got)
	}
}
