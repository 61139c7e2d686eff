package binlog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Genuine binlog files written by MySQL 8.0.22-9.6 and MariaDB 10.5, run
// through the reader's own event handling without a server. Provenance and
// licences: testdata/binlog/NOTICE.

const fixtureDir = "../../testdata/binlog"

// fixtureSchema is what information_schema would say about the fixture
// tables whose files carry no column names.
type fixtureSchema map[string][]Column

func (f fixtureSchema) Columns(_ context.Context, schema, table string) ([]Column, error) {
	cols, ok := f[strings.ToLower(schema+"."+table)]
	if !ok {
		return nil, fmt.Errorf("no columns for %s.%s", schema, table)
	}
	return cols, nil
}

func (fixtureSchema) Forget(string, string) {}

// fixtureTable captures schema.name: id is the message id column, payload
// the payload, headers any other columns the test reads.
func fixtureTable(t *testing.T, schema, name, id, payload string, headers ...string) *outbox.Table {
	t.Helper()
	tb := &outbox.Table{Schema: schema, Name: name,
		Columns: outbox.Columns{ID: id, MessageID: id, Payload: payload, Headers: headers},
		Route:   outbox.Route{Exchange: "ex", RoutingKey: "rk"}}
	if err := tb.Validate("table"); err != nil {
		t.Fatal(err)
	}
	return tb
}

type fixtureRun struct {
	rows    []*outbox.Row
	commits []Commit
	pos     Position
}

// readFixture parses a binlog file with go-mysql's parser set up as the
// stream's syncer is (newSyncer: ParseTime, RenderJSONAsMySQLText, the
// reader's rows decoder) and hands each event to the stream's handler.
// Checksums are not verified: files copied while the server had them open
// carry the "in use" flag.
func readFixture(t *testing.T, file, flavor string, schemas SchemaSource, tables ...*outbox.Table) fixtureRun {
	t.Helper()
	run, err := parseFixture(t, filepath.Join(fixtureDir, file), flavor, schemas, tables...)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return run
}

// parseFixture runs a binlog file through the stream; an error is what the
// stream would end with (streamError, as in stream.run).
func parseFixture(t *testing.T, path, flavor string, schemas SchemaSource, tables ...*outbox.Table) (fixtureRun, error) {
	t.Helper()
	file := filepath.Base(path)
	r, err := New(Config{Host: "x", Port: 1, User: "u", Flavor: flavor}, tables, WithSchemaSource(schemas))
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewTracker(Position{Flavor: flavor, File: file, Pos: 4})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan Event, 1000)
	s := &stream{r: r, out: out, tracker: tr, cancel: func() {}, renames: r.newRenameTracker()}
	p := replication.NewBinlogParser()
	p.SetFlavor(flavor)
	p.SetVerifyChecksum(false)
	p.SetParseTime(true)
	p.SetRenderJSONAsMySQLText(true)
	p.SetRowsEventDecodeFunc(r.decodeRows)
	err = p.ParseFile(path, 4, func(ev *replication.BinlogEvent) error {
		return s.handleSafely(context.Background(), ev)
	})
	close(out)
	var run fixtureRun
	for ev := range out {
		if ev.Kind == KindRow {
			run.rows = append(run.rows, ev.Row)
		} else {
			run.commits = append(run.commits, ev.Commit)
		}
	}
	run.pos = tr.Position()
	if err != nil {
		return run, streamError(err, s.tracker.file, s.lastPos)
	}
	return run, nil
}

// A corrupt event from a genuine file: rmc__mariadb-bin.000001 with the
// column count of its first WRITE_ROWS event (at 612) changed from 5 to 3.
// The stream stops with an error naming the file and the event's position;
// nothing of the event is emitted, and the position stays before it.
func TestFixtureCorruptRowsEvent(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtureDir, "rmc__mariadb-bin.000001"))
	if err != nil {
		t.Fatal(err)
	}
	const countAt = 612 + 19 + 8 // event start, common header, table id and flags
	if data[countAt] != 5 {
		t.Fatalf("byte %d is %d, not the column count 5: the fixture changed", countAt, data[countAt])
	}
	data[countAt] = 3
	path := filepath.Join(t.TempDir(), "corrupt-bin.000001")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	tb := fixtureTable(t, "toddy_test", "outbox", "id", "event", "topic")
	run, err := parseFixture(t, path, FlavorMariaDB, nil, tb)
	if err == nil || !strings.Contains(err.Error(), "after corrupt-bin.000001:612") {
		t.Fatalf("error %v; want one naming corrupt-bin.000001:612", err)
	}
	if len(run.rows) != 0 || len(run.commits) != 0 || run.pos.Pos != 4 {
		t.Fatalf("%d rows, %d commits, position %s; want nothing emitted", len(run.rows), len(run.commits), run.pos)
	}
}

func str(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

func wantValues(t *testing.T, row *outbox.Row, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got := row.Values[k]
		if _, isStr := w.(string); isStr {
			got = str(got)
		}
		if got != w {
			t.Errorf("%s = %#v (%T), want %#v", k, row.Values[k], row.Values[k], w)
		}
	}
}

// rmc__mariadb-bin.000001 (MariaDB 10.5.15): an outbox table with column
// names in the binlog (binlog_row_metadata=FULL), an ENUM decoded by its
// values from the metadata, MariaDB GTIDs, ANNOTATE_ROWS.
func TestFixtureMariaDBOutbox(t *testing.T) {
	tb := fixtureTable(t, "toddy_test", "outbox", "id", "event", "topic", "event_type", "created")
	run := readFixture(t, "rmc__mariadb-bin.000001", FlavorMariaDB, nil, tb)
	if len(run.rows) != 2 || len(run.commits) != 2 {
		t.Fatalf("%d rows, %d commits; want 2, 2", len(run.rows), len(run.commits))
	}
	wantValues(t, run.rows[0], map[string]any{"id": int32(62), "topic": "foo", "event_type": "JSON", "event": `{"foo":1}`})
	if c, ok := run.rows[0].Values["created"].(time.Time); !ok || !c.Equal(time.Date(2022, 4, 20, 22, 18, 4, 0, time.UTC)) {
		t.Errorf("created = %#v", run.rows[0].Values["created"])
	}
	wantValues(t, run.rows[1], map[string]any{"id": int32(63)})
	if got := run.commits[0].GTID.String() + " " + run.commits[1].GTID.String(); got != "0-1-1 0-1-2" {
		t.Errorf("commit GTIDs %s", got)
	}
	if run.pos.GTIDSet != "0-1-2" || run.pos.Pos != 1074 {
		t.Errorf("position %s", run.pos)
	}
}

// rmc__binlog_transaction_with_GTID_TAG.000001 (MySQL 9.6.0): a tagged GTID
// (uuid:tag:gno, MySQL 8.3+) and a row without column names (read from the
// schema source).
func TestFixtureTaggedGTID(t *testing.T) {
	tb := fixtureTable(t, "test", "orders", "id", "amount", "customer_id")
	schema := fixtureSchema{"test.orders": {{Name: "id", DataType: "int"}, {Name: "customer_id", DataType: "int"}, {Name: "amount", DataType: "decimal"}}}
	run := readFixture(t, "rmc__binlog_transaction_with_GTID_TAG.000001", FlavorMySQL, schema, tb)
	if len(run.rows) != 1 || len(run.commits) != 1 {
		t.Fatalf("%d rows, %d commits; want 1, 1", len(run.rows), len(run.commits))
	}
	wantValues(t, run.rows[0], map[string]any{"id": int32(3), "customer_id": int32(100), "amount": "250.00"})
	const gtid = "55778904-0299-11f1-b1b8-4ef0c4956feb:mytag:3"
	if g := run.commits[0].GTID.String(); g != gtid {
		t.Errorf("commit GTID %s, want %s", g, gtid)
	}
	if run.pos.GTIDSet != gtid {
		t.Errorf("position %s, want the tagged set %s", run.pos, gtid)
	}
	// The saved text resumes: it parses back to the same set.
	if back, err := NormalizeGTIDSet(FlavorMySQL, run.pos.GTIDSet); err != nil || back != gtid {
		t.Errorf("round trip %q, %v", back, err)
	}
}

// rmc__json.binlog.000001 (MySQL 8.0.22): binary JSON values become the text
// MySQL prints for them (SELECT json_col): its key order, ", " and ": ".
// The UPDATE is not an insert and emits nothing. The PARTIAL_UPDATE_ROWS
// event after it was logged with binlog_row_image=MINIMAL (a before image
// of the id alone, from which no committed document can be rebuilt): the
// stream stops there, saying to set binlog_row_image=FULL.
func TestFixtureJSONAsMySQLText(t *testing.T) {
	tb := fixtureTable(t, "mysql", "t", "id", "json_col", "name", "age")
	schema := fixtureSchema{"mysql.t": {{Name: "id", DataType: "int"}, {Name: "json_col", DataType: "json"}, {Name: "name", DataType: "varchar"}, {Name: "age", DataType: "int"}}}
	run, err := parseFixture(t, filepath.Join(fixtureDir, "rmc__json.binlog.000001"), FlavorMySQL, schema, tb)
	if err == nil || !strings.Contains(err.Error(), ":3980") || !strings.Contains(err.Error(), "set binlog_row_image=FULL") {
		t.Fatalf("%v; want the stream stopped at the partial update at 3980, saying to set binlog_row_image=FULL", err)
	}
	want := []string{
		`{"age": 24, "data": "xxxxxxxxxx", "name": "Joe"}`,
		`{"age": 32, "data": "yyyyyyyyyy", "name": "Sue"}`,
		`{"age": 40, "data": "zzzzzzzzzz", "name": "Pete"}`,
		`{"age": 24, "data": "xxxxxxxxxx", "name": "Joe"}`,
		`{"age": 32, "data": "yyyyyyyyyy", "name": "Sue"}`,
		`{"age": 40, "data": "zzzzzzzzzz", "name": "Pete"}`,
	}
	if len(run.rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(run.rows), len(want))
	}
	for i, w := range want {
		wantValues(t, run.rows[i], map[string]any{"id": int32(i + 1), "json_col": w})
	}
	// Anonymous GTIDs (GTID mode off): file/pos positions, one per
	// transaction, up to the one before the partial update's.
	if len(run.commits) != 7 || run.pos.HasGTID() || run.pos.Pos != 3527 {
		t.Errorf("%d commits, position %s; want 7 and file/pos 3527", len(run.commits), run.pos)
	}
}

// rmc__mysql-enum-string-set.000001 (MySQL 8.0.28): column names and ENUM/SET
// values from FULL metadata; an ENUM index and a SET bitmask become their
// text, as MySQL shows them.
func TestFixtureEnumAndSet(t *testing.T) {
	tb := fixtureTable(t, "mysql", "t", "f1", "f5", "f2", "f3", "f4")
	run := readFixture(t, "rmc__mysql-enum-string-set.000001", FlavorMySQL, nil, tb)
	if len(run.rows) != 1 {
		t.Fatalf("%d rows, want 1 (the INSERT; the UPDATE and DELETE emit nothing)", len(run.rows))
	}
	wantValues(t, run.rows[0], map[string]any{"f3": "var1", "f4": "one,three", "f5": "0123456789"})
	if f1 := str(run.rows[0].Values["f1"]); !strings.HasPrefix(f1, "0123456789") || len(f1) != 100 {
		t.Errorf("f1 = %q", f1)
	}
	if g := run.pos.GTIDSet; g != "93e95066-a2f4-11ec-9b69-9657f0ae95e2:1-5" {
		t.Errorf("position %s", g)
	}
}

// rmc__binlog-invisible-columns.000001 (MySQL 8.0.26): INVISIBLE columns are
// in the row image and in the FULL metadata names; UNSIGNED columns decode
// unsigned; NULLs stay NULL.
func TestFixtureInvisibleColumns(t *testing.T) {
	tb := fixtureTable(t, "mysql", "t1", "f3", "f4", "f1", "f2", "f5", "f6")
	run := readFixture(t, "rmc__binlog-invisible-columns.000001", FlavorMySQL, nil, tb)
	if len(run.rows) != 2 {
		t.Fatalf("%d rows, want 2", len(run.rows))
	}
	wantValues(t, run.rows[0], map[string]any{"f1": uint32(1), "f2": uint32(2), "f3": int32(-3), "f4": "4", "f5": "\x05", "f6": uint64(6000000000)})
	wantValues(t, run.rows[1], map[string]any{"f1": nil, "f2": nil, "f3": int32(-33), "f4": "44", "f5": "U", "f6": nil})
}

// Compressed transactions (binlog_transaction_compression=ON): the rows and
// the commit inside TRANSACTION_PAYLOAD events are emitted like
// uncompressed ones, and the position moves to the end of each payload.
func TestFixtureCompressedTransactions(t *testing.T) {
	t.Run("rmc__transaction_compression.000001 (MySQL 8.0.32, one INSERT)", func(t *testing.T) {
		tb := fixtureTable(t, "test", "tb1", "id", "id")
		run := readFixture(t, "rmc__transaction_compression.000001", FlavorMySQL,
			fixtureSchema{"test.tb1": {{Name: "id", DataType: "int"}}}, tb)
		if len(run.rows) != 1 || len(run.commits) != 1 || run.commits[0].Pos != 431 {
			t.Fatalf("%d rows, commits %+v; want 1 row and a commit at 431", len(run.rows), run.commits)
		}
		wantValues(t, run.rows[0], map[string]any{"id": int32(1)})
	})
	t.Run("osheroff__mysql-bin.compressed (MySQL 8.0.28, an UPDATE)", func(t *testing.T) {
		// An UPDATE of a row written before its transaction, in a table
		// without a status column: decoded, and nothing to publish.
		tb := fixtureTable(t, "demo", "movies", "id", "id")
		cols := []Column{{Name: "id", DataType: "int"}, {Name: "title", DataType: "varchar"}, {Name: "year", DataType: "int"}}
		for _, n := range []string{"country", "genre", "actors", "director", "composer", "screenwriter", "cinematographer", "company"} {
			cols = append(cols, Column{Name: n, DataType: "varchar"})
		}
		run := readFixture(t, "osheroff__mysql-bin.compressed", FlavorMySQL, fixtureSchema{"demo.movies": cols}, tb)
		if len(run.rows) != 0 || len(run.commits) != 1 || run.commits[0].Pos != 724 {
			t.Fatalf("%d rows, commits %+v; want no row and a commit at 724", len(run.rows), run.commits)
		}
	})
	t.Run("apecloud__mysql-bin.000057 (MySQL 8.0.31, GTIDs, a JSON column)", func(t *testing.T) {
		b := fixtureTable(t, "a", "b", "id", "id")
		wide := fixtureTable(t, "a", "test_table_3", "c1", "c10")
		var cols []Column
		for i := 1; i <= 20; i++ {
			c := Column{Name: fmt.Sprintf("c%d", i), DataType: "other"}
			if i == 10 {
				c.DataType = "json"
			}
			cols = append(cols, c)
		}
		run := readFixture(t, "apecloud__mysql-bin.000057", FlavorMySQL,
			fixtureSchema{"a.b": {{Name: "id", DataType: "int"}}, "a.test_table_3": cols}, b, wide)
		if len(run.rows) != 2 {
			t.Fatalf("%d rows, want 2 (the UPDATE in the second payload emits nothing)", len(run.rows))
		}
		wantValues(t, run.rows[0], map[string]any{"id": int32(1)})
		wantValues(t, run.rows[1], map[string]any{"c1": int32(6666), "c10": `{"c": 1}`})
		var got []string
		for _, c := range run.commits {
			got = append(got, fmt.Sprintf("%s@%d", c.GTID, c.Pos))
		}
		const sid = "76f3e7be-6720-11ed-9cad-0242ac110002"
		if want := sid + ":11@378 " + sid + ":12@651 " + sid + ":13@1283"; strings.Join(got, " ") != want {
			t.Errorf("commits %s, want %s", strings.Join(got, " "), want)
		}
		if run.pos.GTIDSet != sid+":11-13" {
			t.Errorf("position %s", run.pos)
		}
	})
}
