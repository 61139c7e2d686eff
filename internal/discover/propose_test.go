package discover

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The outbox tables exactly as the design documents write them
// (testdata/seed/seed-ddl.sql, and Debezium's and Eventuate's own DDL in
// schema/) are each recognised as their preset, with nothing cleared; the
// inbox tables of the same file are not taken for outboxes silently.
func TestSeedTablesAreTheirPresets(t *testing.T) {
	seed := readDDL(t, "testdata/seed/seed-ddl.sql")
	for _, tc := range []struct {
		table  *Table
		preset string
		notes  []string // keys of the notes expected, in order
	}{
		{seed["producer_message"], "producer-message", []string{"columns.message_id"}},
		{seed["local_message"], "local-message", nil},
		{seed["t_message_record"], "message-record", nil},
		{readDDL(t, "schema/producer_message.sql")["producer_message"], "producer-message", nil},
		{readDDL(t, "schema/local_message.sql")["local_message"], "local-message", nil},
		{readDDL(t, "schema/message_record.sql")["t_message_record"], "message-record", nil},
		{readDDL(t, "schema/debezium_outbox.sql")["outbox"], "debezium", nil},
		{readDDL(t, "schema/eventuate_message.sql")["message"], "eventuate", nil},
	} {
		p, err := Propose(tc.table)
		if err != nil {
			t.Fatalf("%s: %v", tc.table.Name, err)
		}
		if p.Preset != tc.preset || len(p.Cleared) > 0 || p.HeadersChanged {
			t.Errorf("%s: preset %q, cleared %v, headers changed %v; want %s as it is", tc.table.Name, p.Preset, p.Cleared, p.HeadersChanged, tc.preset)
		}
		if got := noteKeys(p); !reflect.DeepEqual(got, tc.notes) {
			t.Errorf("%s: notes %v, want %v:\n%v", tc.table.Name, got, tc.notes, p.Notes)
		}
	}
	// Debezium's trace column comes along; the seed's message_id note
	// says what to do.
	if p, _ := Propose(readDDL(t, "schema/debezium_outbox.sql")["outbox"]); p.Table.Trace.Format != outbox.TraceDebezium {
		t.Errorf("debezium: trace %+v, want the tracingspancontext column as format debezium", p.Table.Trace)
	}
	p, _ := Propose(seed["producer_message"])
	if !strings.Contains(p.Notes[0].Text, `column "message_id" has no unique index`) || !strings.Contains(p.Notes[0].Text, `primary key "id"`) {
		t.Errorf("producer_message's note: %s", p.Notes[0])
	}
	// The seed's consumer_message has every column producer-message maps,
	// but it is an inbox: said so.
	p, err := Propose(seed["consumer_message"])
	if err != nil || !strings.Contains(strings.Join(notes(p), "\n"), `"first_consume_time" says this is a consumer's inbox`) {
		t.Errorf("consumer_message: %v %v", err, notes(p))
	}
}

// A table of its own is mapped column by column, from names, types,
// indexes, defaults and comments; what init cannot read from the table is
// a note under the key it concerns.
func TestCustomTablesMapped(t *testing.T) {
	custom := readDDL(t, "testdata/init/custom.sql")
	for _, tc := range []struct {
		name     string
		columns  outbox.Columns
		statuses outbox.Statuses
		route    outbox.Route
		notes    []string
	}{
		{"events", outbox.Columns{ID: "id", MessageID: "msg_id", Exchange: "target", Payload: "body", Status: "state",
			RetryCount: "retries", Error: "err", CreatedAt: "created"},
			outbox.Statuses{Pending: "NEW", Sent: "SENT", Failed: "FAILED", Publishable: []string{"NEW"}}, outbox.Route{},
			[]string{"statuses.sent", "statuses.failed", "route.routing_key"}},
		{"uuid_events", outbox.Columns{ID: "id", MessageID: "id", Payload: "body", Status: "state", CreatedAt: "created"},
			outbox.Statuses{Pending: "PENDING", Sent: "SENT", Failed: "FAILED", Publishable: []string{"PENDING"}}, outbox.Route{Exchange: "shop"},
			[]string{"statuses.pending", "statuses.sent", "statuses.failed", "route.exchange", "route.routing_key"}},
		{"ob", outbox.Columns{ID: "id", Payload: "body", Status: "state"},
			outbox.Statuses{Pending: "PENDING", Sent: "SENT", Publishable: []string{"PENDING"}}, outbox.Route{Exchange: "shop"},
			[]string{"statuses", "route.exchange", "route.routing_key"}},
		{"p_json", outbox.Columns{ID: "id", RoutingKey: "kind", Payload: "payload", Status: "status", CreatedAt: "created"},
			outbox.Statuses{Pending: "PENDING", Sent: "SENT", Failed: "FAILED", Publishable: []string{"PENDING"}},
			outbox.Route{Exchange: "shop", ContentType: "application/json"}, []string{"statuses.sent", "statuses.failed", "route.exchange"}},
		{"t_num", outbox.Columns{ID: "id", Payload: "body", Status: "st", RetryCount: "retries", NextRetryTime: "next_retry",
			Error: "err", CreatedAt: "created", UpdatedAt: "updated", Version: "ver"},
			outbox.Statuses{Pending: "0", Sent: "1", Failed: "2", Publishable: []string{"0"}, Numeric: true}, outbox.Route{Exchange: "shop"},
			[]string{"statuses", "route.exchange", "route.routing_key"}},
		{"outbox_events", outbox.Columns{ID: "event_id", MessageID: "event_uuid", RoutingKey: "kind", Payload: "data", Status: "state",
			RetryCount: "attempts", NextRetryTime: "retry_at", Error: "last_error", CreatedAt: "created", Headers: []string{"tenant"}},
			outbox.Statuses{Pending: "0", Sent: "1", Failed: "9", Publishable: []string{"0"}, Numeric: true},
			outbox.Route{Exchange: "shop", ContentType: "application/json"}, []string{"route.exchange"}},
		{"mq_outbox", outbox.Columns{ID: "id", MessageID: "msg_key", Exchange: "topic", RoutingKey: "tag", Payload: "msg_content",
			Status: "msg_status", RetryCount: "send_times", CreatedAt: "create_time", Headers: []string{"biz_id"}},
			outbox.Statuses{Pending: "0", Sent: "1", Failed: "2", Publishable: []string{"0"}, Numeric: true}, outbox.Route{},
			[]string{"created_at_epoch", "columns.message_id"}},
		{"unique_key_only", outbox.Columns{ID: "event_id", MessageID: "event_id", Payload: "body"}, outbox.Statuses{},
			outbox.Route{Exchange: "shop"}, []string{"columns.id", "route.exchange", "route.routing_key"}},
	} {
		tb := custom[tc.name]
		if tb == nil {
			t.Fatalf("no table %s in custom.sql", tc.name)
		}
		p, err := Propose(tb)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if p.Preset != "" {
			t.Errorf("%s: taken for the %s preset", tc.name, p.Preset)
		}
		if !reflect.DeepEqual(p.Table.Columns, tc.columns) {
			t.Errorf("%s: columns\n%+v, want\n%+v", tc.name, p.Table.Columns, tc.columns)
		}
		if !reflect.DeepEqual(p.Table.Statuses, tc.statuses) {
			t.Errorf("%s: statuses %+v, want %+v", tc.name, p.Table.Statuses, tc.statuses)
		}
		if !reflect.DeepEqual(p.Table.Route, tc.route) {
			t.Errorf("%s: route %+v, want %+v", tc.name, p.Table.Route, tc.route)
		}
		if got := noteKeys(p); !reflect.DeepEqual(got, tc.notes) {
			t.Errorf("%s: notes on %v, want %v:\n%s", tc.name, got, tc.notes, strings.Join(notes(p), "\n"))
		}
	}
	// The values of a comment in Chinese, an epoch in milliseconds by the
	// values present, seconds likewise, a trace column.
	mq := custom["mq_outbox"]
	mq.Values["create_time"] = []string{"1718000000123"}
	if p, _ := Propose(mq); p.Table.CreatedAtEpoch != "ms" || len(noteKeys(p)) != 1 {
		t.Errorf("mq_outbox with rows in ms: epoch %q, notes %v", p.Table.CreatedAtEpoch, notes(p))
	}
	mq.Values["create_time"] = []string{"1718000000"}
	if p, _ := Propose(mq); p.Table.CreatedAtEpoch != "s" {
		t.Errorf("mq_outbox with rows in s: epoch %q", p.Table.CreatedAtEpoch)
	}
	if p, _ := Propose(custom["outbox_events"]); p.Table.Trace.Format != outbox.TraceTraceparent {
		t.Errorf("outbox_events: trace %+v", p.Table.Trace)
	}
	// The values present decide: a DONE in the rows is "sent", an unknown
	// value is named as not published.
	ev := custom["events"]
	ev.Values["state"] = []string{"NEW", "DONE", "DEAD", "ON_HOLD"}
	p, _ := Propose(ev)
	if s := p.Table.Statuses; s.Pending != "NEW" || s.Sent != "DONE" || s.Failed != "DEAD" {
		t.Errorf("events with rows: %+v", s)
	}
	if got := notes(p); len(got) != 2 || !strings.Contains(got[0], `the value "ON_HOLD" of column "state" means none of`) {
		t.Errorf("events with rows: notes %v", got)
	}
}

// Found by TestProposeProperties (shrunk): an ENUM status without a value
// that reads as sent. The relay's write of a value the ENUM lacks fails,
// so no guess is right: the note says the value written is not in the
// ENUM and what to change.
func TestEnumWithoutSentValueIsNamed(t *testing.T) {
	pending := Column{Name: "status", DataType: "enum", ColumnType: "enum('PENDING')"}
	tb := &Table{Schema: "shop", Name: "t", Values: map[string][]string{}, Columns: []Column{
		{Name: "routingkey", DataType: "varchar", ColumnType: "varchar(100)"},
		{Name: "payload", DataType: "text", ColumnType: "text"}, pending},
		Indexes: []Index{{Name: "PRIMARY", Unique: true, Columns: []string{"routingkey"}}}}
	p, err := Propose(tb)
	if err != nil {
		t.Fatal(err)
	}
	checkProposal(t, tb, p, err)
	if !noted(p, `the ENUM of column "status" has no value that reads as sent (values seen: "PENDING"): wrote "SENT", which the column cannot take`) {
		t.Fatalf("notes: %v", notes(p))
	}
}

// Found by TestProposeProperties: a table with every column of the
// debezium preset but no key was recognised as the preset, whose rows the
// relay could not mark one by one. A preset needs its id to name one row.
func TestPresetNeedsItsIDToBeAKey(t *testing.T) {
	tb := readDDL(t, "schema/debezium_outbox.sql")["outbox"]
	tb.Indexes = nil
	p, err := Propose(tb)
	checkProposal(t, tb, p, err)
	if _, ok := errors.AsType[*UnmappableError](err); !ok {
		t.Fatalf("debezium's table without a key: %v, %+v", err, p)
	}
}

// Found by TestProposeProperties: a status DEFAULT holding a quote became
// statuses.pending, which Validate refuses (the relay writes statuses into
// SQL literals). Such a value is named, and never chosen.
func TestStatusValueWithAQuoteIsNotChosen(t *testing.T) {
	def := "it's"
	tb := &Table{Schema: "shop", Name: "t", Values: map[string][]string{}, Columns: []Column{
		{Name: "id", DataType: "bigint", ColumnType: "bigint"},
		{Name: "payload", DataType: "text", ColumnType: "text"},
		{Name: "state", DataType: "varchar", ColumnType: "varchar(16)", Default: &def}},
		Indexes: []Index{{Name: "PRIMARY", Unique: true, Columns: []string{"id"}}}}
	p, err := Propose(tb)
	checkProposal(t, tb, p, err)
	if p.Table.Statuses.Pending != "PENDING" || !noted(p, `the value "it's" of column "state" holds a quote`) {
		t.Fatalf("statuses %+v, notes %v", p.Table.Statuses, notes(p))
	}
}

// A table the relay cannot read is refused, naming each thing missing.
func TestUnmappableTablesNameWhatIsMissing(t *testing.T) {
	un := readDDL(t, "testdata/init/unmappable.sql")
	seed := readDDL(t, "testdata/seed/seed-ddl.sql")
	for _, tc := range []struct {
		table *Table
		want  []string
	}{
		{un["no_key"], []string{"no primary key (nor a unique NOT NULL column)"}},
		{un["composite_key"], []string{"no single-column primary key (it has one over tenant, id)"}},
		{un["no_payload"], []string{"no payload column"}},
		{un["neither"], []string{"no primary key", "no payload column"}},
		{seed["t_msg_dedup"], []string{"no payload column"}},
		{seed["t_message_log"], []string{"no payload column"}},
	} {
		_, err := Propose(tc.table)
		u, ok := errors.AsType[*UnmappableError](err)
		if !ok || len(u.Missing) != len(tc.want) {
			t.Errorf("%s: %v, want %d things missing", tc.table.Name, err, len(tc.want))
			continue
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(u.Missing[i], w) {
				t.Errorf("%s: missing[%d] %q, want %q...", tc.table.Name, i, u.Missing[i], w)
			}
		}
		if !strings.HasPrefix(err.Error(), "shop."+tc.table.Name+" cannot be relayed: ") {
			t.Errorf("%s: %v", tc.table.Name, err)
		}
	}
}

// What init writes loads as a relay config, and the table it loads is the
// one proposed: the comments and the quoting change nothing.
func TestRenderedConfigLoadsAsProposed(t *testing.T) {
	var all []*Table
	for _, f := range []string{"testdata/seed/seed-ddl.sql", "testdata/init/custom.sql", "schema/producer_message.sql",
		"schema/local_message.sql", "schema/message_record.sql", "schema/debezium_outbox.sql", "schema/eventuate_message.sql"} {
		for _, tb := range readDDL(t, f) {
			all = append(all, tb)
		}
	}
	n := 0
	for _, tb := range all {
		p, err := Propose(tb)
		if err != nil {
			continue
		}
		n++
		checkRoundTrip(t, tb, p)
	}
	if n < 15 {
		t.Fatalf("only %d tables mapped", n)
	}
}

// checkRoundTrip renders p, loads it as the relay would and compares.
func checkRoundTrip(t fataler, tb *Table, p *Proposal) {
	t.Helper()
	var out bytes.Buffer
	s := Settings{Name: "shop-relay", Source: Server{Host: "10.0.0.12", Port: 3306, User: "relay", PasswordVar: "RELAY_DB_PASSWORD"},
		Primary: Server{Host: "10.0.0.11", Port: 3306, User: "relay", PasswordVar: "RELAY_DB_PASSWORD"}}
	if err := Render(&out, s, []*Table{tb}, []*Proposal{p}); err != nil {
		t.Fatalf("%v", err)
	}
	env := map[string]string{"RELAY_DB_PASSWORD": "pw", "RELAY_BROKER_PASSWORD": "pw"}
	cfg, err := config.Parse(out.Bytes(), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("%s: the config does not load: %v\n%s", tb.Name, err, out.String())
	}
	want := p.Table
	if want.MaxRetries == 0 {
		want.MaxRetries = 5 // the config's default
	}
	got := *cfg.Tables[0]
	if err := want.Validate("want"); err != nil { // loads the zone, as the config did
		t.Fatalf("%s: the proposal does not validate: %v", tb.Name, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: loaded\n%+v\nproposed\n%+v\n%s", tb.Name, got, want, out.String())
	}
}

// fataler is what the checks need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func noteKeys(p *Proposal) []string {
	var keys []string
	for _, n := range p.Notes {
		keys = append(keys, n.Key)
	}
	return keys
}

func notes(p *Proposal) []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, n := range p.Notes {
		out = append(out, n.String())
	}
	return out
}
