package binlog

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// fakeSchema is a SchemaSource whose table definition the test changes, as
// an ALTER TABLE on the source would.
type fakeSchema struct {
	mu      sync.Mutex
	cols    []Column
	cached  []Column
	reads   int
	forgets int
}

func (f *fakeSchema) set(cols []Column) { f.mu.Lock(); f.cols = cols; f.mu.Unlock() }

func (f *fakeSchema) Columns(context.Context, string, string) ([]Column, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cached == nil {
		f.reads++
		f.cached = f.cols
	}
	return f.cached, nil
}

func (f *fakeSchema) Forget(string, string) {
	f.mu.Lock()
	f.forgets++
	f.cached = nil
	f.mu.Unlock()
}

// col is a column of the synthetic table: name, information_schema type,
// binlog type and metadata.
type col struct {
	name, dataType string
	typ            byte
	meta           uint16
}

var (
	cID      = col{"id", "bigint", mysql.MYSQL_TYPE_LONGLONG, 0}
	cMsgID   = col{"message_id", "varchar", mysql.MYSQL_TYPE_VARCHAR, 256}
	cEx      = col{"exchange", "varchar", mysql.MYSQL_TYPE_VARCHAR, 1020}
	cRK      = col{"routing_key", "varchar", mysql.MYSQL_TYPE_VARCHAR, 1020}
	cBody    = col{"content", "longtext", mysql.MYSQL_TYPE_BLOB, 4}
	cStatus  = col{"status", "varchar", mysql.MYSQL_TYPE_VARCHAR, 64}
	cCreated = col{"create_time", "datetime", mysql.MYSQL_TYPE_DATETIME2, 3}
	cTenant  = col{"tenant", "int", mysql.MYSQL_TYPE_LONG, 0}
	cState   = col{"status", "enum", mysql.MYSQL_TYPE_STRING, uint16(mysql.MYSQL_TYPE_ENUM)<<8 | 1}
)

// tableMap builds a TABLE_MAP event; with names it is what
// binlog_row_metadata=FULL sends, without it what MINIMAL/NOBLOB send.
func tableMap(names bool, cols ...col) *replication.TableMapEvent {
	e := &replication.TableMapEvent{Schema: []byte("app"), Table: []byte("producer_message"), ColumnCount: uint64(len(cols))}
	for _, c := range cols {
		e.ColumnType = append(e.ColumnType, c.typ)
		e.ColumnMeta = append(e.ColumnMeta, c.meta)
		if names {
			e.ColumnName = append(e.ColumnName, []byte(c.name))
		}
	}
	return e
}

func schemaOf(cols ...col) []Column {
	var out []Column
	for _, c := range cols {
		out = append(out, Column{Name: c.name, DataType: c.dataType})
	}
	return out
}

func seedTable(t *testing.T) *outbox.Table {
	t.Helper()
	return outboxtest.Preset(t, "producer-message", "app", func(p *outbox.Table) {
		// Only the columns the synthetic table has.
		p.Columns = outbox.Columns{ID: "id", MessageID: "message_id", Exchange: "exchange", RoutingKey: "routing_key",
			Payload: "content", Status: "status", CreatedAt: "create_time"}
	})
}

func newTestReader(t *testing.T, tb *outbox.Table, schemas SchemaSource) *Reader {
	t.Helper()
	r, err := New(Config{Host: "x", Port: 1, User: "u", Flavor: FlavorMariaDB}, []*outbox.Table{tb}, WithSchemaSource(schemas))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func decode(t *testing.T, r *Reader, tb *outbox.Table, tme *replication.TableMapEvent, values []any) *outbox.Row {
	t.Helper()
	lay, err := r.layoutFor(context.Background(), tb, tme)
	if err != nil {
		t.Fatalf("layout: %v", err)
	}
	return lay.row(tb, values)
}

func checkRow(t *testing.T, row *outbox.Row, want map[string]any) {
	t.Helper()
	for k, v := range want {
		got := row.Values[k]
		if b, ok := got.([]byte); ok {
			got = string(b)
		}
		if got != v {
			t.Fatalf("%s = %#v, want %#v (row %v)", k, row.Values[k], v, row.Values)
		}
	}
}

// With column names in every TABLE_MAP, each row is decoded with its own
// event's layout, whatever the order of the columns, and the schema source
// is never asked.
func TestLayoutFromBinlogMetadata(t *testing.T) {
	tb := seedTable(t)
	fake := &fakeSchema{}
	r := newTestReader(t, tb, fake)
	before := tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus)
	row := decode(t, r, tb, before, []any{int64(1), "m1", "ex", "rk1", []byte("b1"), "PENDING"})
	checkRow(t, row, map[string]any{"id": int64(1), "message_id": "m1", "exchange": "ex", "routing_key": "rk1", "content": "b1"})

	// ALTER: a column added first, routing_key moved after content.
	after := tableMap(true, cTenant, cID, cMsgID, cEx, cBody, cRK, cStatus)
	row = decode(t, r, tb, after, []any{int32(7), int64(2), "m2", "ex", []byte("b2"), "rk2", "PENDING"})
	checkRow(t, row, map[string]any{"id": int64(2), "message_id": "m2", "routing_key": "rk2", "content": "b2", "status": "PENDING"})

	// A row of the old layout still in the stream after that.
	row = decode(t, r, tb, before, []any{int64(3), "m3", "ex", "rk3", []byte("b3"), "SENDING"})
	checkRow(t, row, map[string]any{"id": int64(3), "routing_key": "rk3", "content": "b3", "status": "SENDING"})
	if fake.reads != 0 {
		t.Fatalf("schema read %d times with names in the binlog", fake.reads)
	}
}

// Without column names the schema is read from the source, re-read at the
// DDL's place in the stream, and rows on either side are decoded with their
// own layout.
func TestLayoutFallbackRereadsAtDDL(t *testing.T) {
	tb := seedTable(t)
	v1 := []col{cID, cMsgID, cEx, cRK, cBody, cStatus}
	v2 := []col{cID, cTenant, cMsgID, cEx, cBody, cRK, cStatus}
	fake := &fakeSchema{cols: schemaOf(v1...)}
	r := newTestReader(t, tb, fake)

	for i := 0; i < 3; i++ {
		row := decode(t, r, tb, tableMap(false, v1...), []any{int64(i), "m", "ex", "rk-old", []byte("old"), "PENDING"})
		checkRow(t, row, map[string]any{"id": int64(i), "routing_key": "rk-old", "content": "old"})
	}
	if fake.reads != 1 {
		t.Fatalf("schema read %d times for three rows of one layout, want 1 (cached)", fake.reads)
	}

	// The source applies the ALTER; the stream then passes its query event.
	fake.set(schemaOf(v2...))
	r.noteDDL("app", "ALTER TABLE `producer_message` ADD COLUMN tenant INT AFTER id, MODIFY routing_key VARCHAR(255) AFTER content")
	if fake.forgets != 1 || fake.reads != 2 {
		t.Fatalf("after DDL: %d forgets, %d reads; want the schema re-read at the DDL (1, 2)", fake.forgets, fake.reads)
	}
	row := decode(t, r, tb, tableMap(false, v2...), []any{int64(10), int32(5), "m", "ex", []byte("new"), "rk-new", "PENDING"})
	checkRow(t, row, map[string]any{"id": int64(10), "routing_key": "rk-new", "content": "new", "status": "PENDING"})

	// DDL on another table leaves the cache alone.
	r.noteDDL("app", "CREATE TABLE audit_log (id INT)")
	if fake.forgets != 1 {
		t.Fatalf("unrelated DDL forgot the schema")
	}
}

// When the schema read from the source no longer matches the row (the
// relay is behind a DDL and the source has no column names), the reader
// refuses rather than putting values in the wrong columns.
func TestLayoutFallbackRefusesAMismatch(t *testing.T) {
	tb := seedTable(t)
	v1 := []col{cID, cMsgID, cEx, cRK, cBody, cStatus}
	for _, c := range []struct {
		name   string
		schema []col
		want   string
	}{
		{"column added", []col{cID, cTenant, cMsgID, cEx, cRK, cBody, cStatus}, "has 6 columns but the schema read from the source has 7"},
		// Same count, columns moved: the types give it away.
		{"columns moved", []col{cBody, cID, cMsgID, cEx, cRK, cStatus}, "column 1 is longtext"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newTestReader(t, tb, &fakeSchema{cols: schemaOf(c.schema...)})
			_, err := r.layoutFor(context.Background(), tb, tableMap(false, v1...))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "binlog_row_metadata=FULL") {
				t.Fatalf("error %v, want %q and the fix", err, c.want)
			}
		})
	}
	r := newTestReader(t, tb, nil)
	if _, err := r.layoutFor(context.Background(), tb, tableMap(false, v1...)); err == nil || !strings.Contains(err.Error(), "binlog_row_metadata=FULL") {
		t.Fatalf("no names and no schema source: %v", err)
	}
}

func TestLayoutUnsignedIDs(t *testing.T) {
	tb := seedTable(t)
	cols := []col{cID, cMsgID, cEx, cRK, cBody, cStatus}
	// go-mysql decodes BIGINT as int64; 2^64-1 arrives as -1.
	values := []any{int64(-1), "m", "ex", "rk", []byte("b"), "PENDING"}

	// Signedness from the binlog (MINIMAL and FULL metadata carry it): id
	// is the first and only numeric column.
	withNames := tableMap(true, cols...)
	withNames.SignednessBitmap = []byte{0x80}
	row := decode(t, newTestReader(t, tb, nil), tb, withNames, values)
	if row.ID != uint64(18446744073709551615) {
		t.Fatalf("id %#v from binlog signedness", row.ID)
	}
	// Without any metadata, from information_schema's COLUMN_TYPE.
	schema := schemaOf(cols...)
	schema[0].Unsigned = true
	row = decode(t, newTestReader(t, tb, &fakeSchema{cols: schema}), tb, tableMap(false, cols...), values)
	if row.ID != uint64(18446744073709551615) {
		t.Fatalf("id %#v from the schema", row.ID)
	}
}

// DATETIME carries no zone: its wall clock is taken in route.time_zone
// (here a header copies the created column, so the stream reads it).
func TestLayoutDatetimeInTheTableZone(t *testing.T) {
	tb := seedTable(t)
	tb.Route.TimeZone = "Asia/Shanghai"
	tb.Columns.Headers = append(tb.Columns.Headers, "create_time")
	if err := tb.Validate("t"); err != nil {
		t.Fatal(err)
	}
	wall := time.Date(2024, 2, 29, 23, 59, 58, 123000000, time.UTC) // as go-mysql decodes it
	row := decode(t, newTestReader(t, tb, nil), tb, tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated),
		[]any{int64(1), "m", "ex", "rk", []byte("b"), "PENDING", wall})
	got, ok := row.Values["create_time"].(time.Time)
	if !ok || got.Format(time.RFC3339Nano) != "2024-02-29T23:59:58.123+08:00" {
		t.Fatalf("create_time %#v", row.Values["create_time"])
	}
	if !got.Equal(time.Date(2024, 2, 29, 15, 59, 58, 123000000, time.UTC)) {
		t.Fatalf("instant %s", got.UTC())
	}
}

// The stream keeps only the columns it reads: the bookkeeping ones (the
// created time here) are left out of a row unless a route or header names
// them.
func TestLayoutLeavesBookkeepingColumnsOut(t *testing.T) {
	tb := seedTable(t)
	wall := time.Date(2024, 2, 29, 23, 59, 58, 0, time.UTC)
	row := decode(t, newTestReader(t, tb, nil), tb, tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated),
		[]any{int64(1), "m", "ex", "rk", []byte("b"), "PENDING", wall})
	if v, ok := row.Values["create_time"]; ok {
		t.Fatalf("create_time kept in the row: %#v", v)
	}
	if row.Values["message_id"] != "m" || row.Values["status"] != "PENDING" {
		t.Fatalf("row values %v", row.Values)
	}
}

// An ENUM status is logged as its index; the reader turns it into the value
// so the publishable statuses compare by value.
func TestLayoutEnumStatus(t *testing.T) {
	tb := seedTable(t)
	values := func(idx int64) []any { return []any{int64(1), "m", "ex", "rk", []byte("b"), idx} }
	full := tableMap(true, cID, cMsgID, cEx, cRK, cBody, cState)
	full.EnumStrValue = [][][]byte{{[]byte("PENDING"), []byte("SENDING"), []byte("SENT")}}
	r := newTestReader(t, tb, nil)
	for idx, want := range map[int64]string{1: "PENDING", 2: "SENDING", 3: "SENT", 0: ""} {
		row := decode(t, r, tb, full, values(idx))
		if row.Values["status"] != want {
			t.Fatalf("index %d: %#v, want %q", idx, row.Values["status"], want)
		}
		if tb.IsPublishable(row.Values["status"]) != (want == "PENDING" || want == "SENDING") {
			t.Fatalf("index %d: publishable wrong", idx)
		}
	}
	schema := schemaOf(cID, cMsgID, cEx, cRK, cBody, cState)
	schema[5].Enum = []string{"PENDING", "SENDING", "SENT"}
	row := decode(t, newTestReader(t, tb, &fakeSchema{cols: schema}), tb, tableMap(false, cID, cMsgID, cEx, cRK, cBody, cState), values(2))
	if row.Values["status"] != "SENDING" {
		t.Fatalf("fallback enum: %#v", row.Values["status"])
	}
}

// A mapped column the table no longer has (dropped while streaming) is
// simply absent from the row; routing reports it.
func TestLayoutDroppedColumn(t *testing.T) {
	tb := seedTable(t)
	row := decode(t, newTestReader(t, tb, nil), tb, tableMap(true, cID, cMsgID, cEx, cBody, cStatus),
		[]any{int64(1), "m", "ex", []byte("b"), "PENDING"})
	if _, ok := row.Values["routing_key"]; ok {
		t.Fatalf("routing_key present: %v", row.Values)
	}
	checkRow(t, row, map[string]any{"content": "b", "exchange": "ex"})
}

func TestLayoutCopiesBytes(t *testing.T) {
	tb := seedTable(t)
	buf := []byte("payload")
	row := decode(t, newTestReader(t, tb, nil), tb, tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus),
		[]any{int64(1), "m", "ex", "rk", buf, "PENDING"})
	copy(buf, "XXXXXXX")
	if string(row.Values["content"].([]byte)) != "payload" {
		t.Fatal("row aliases the packet buffer")
	}
}

func TestParseEnum(t *testing.T) {
	for in, want := range map[string]string{
		"enum('PENDING','SENT','FAILED')": "PENDING|SENT|FAILED",
		"enum('it''s','a,b','x\\\\y')":    "it's|a,b|x\\y",
		"enum('')":                        "",
		"varchar(10)":                     "",
	} {
		if got := strings.Join(parseEnum(in), "|"); got != want {
			t.Errorf("parseEnum(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every transaction logs its own TABLE_MAP: one with the same content reuses
// the layout, one that differs in anything the layout depends on does not.
func TestLayoutReusedForAnEqualTableMap(t *testing.T) {
	tb := seedTable(t)
	r := newTestReader(t, tb, &fakeSchema{})
	cols := []col{cID, cMsgID, cEx, cRK, cBody, cStatus}
	first, err := r.layoutFor(context.Background(), tb, tableMap(true, cols...))
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.layoutFor(context.Background(), tb, tableMap(true, cols...))
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatal("an equal TABLE_MAP of the next transaction rebuilt the layout")
	}
	renamed := tableMap(true, cID, cMsgID, cEx, cBody, cRK, cStatus) // two columns swapped
	lay, err := r.layoutFor(context.Background(), tb, renamed)
	if err != nil {
		t.Fatal(err)
	}
	if lay == first {
		t.Fatal("a TABLE_MAP with the columns in another order reused the old layout")
	}
	row := lay.row(tb, []any{int64(1), "m", "ex", []byte("body"), "rk", "PENDING"})
	checkRow(t, row, map[string]any{"routing_key": "rk", "content": "body"})
	newID := tableMap(true, cID, cMsgID, cEx, cBody, cRK, cStatus)
	newID.TableID = 42
	if other, _ := r.layoutFor(context.Background(), tb, newID); other == lay {
		t.Fatal("a TABLE_MAP with another table id reused the old layout")
	}
}

// An INSERT logged with binlog_row_image=MINIMAL holds only the columns the
// statement named: a column the relay reads that is not in the image is
// reported by name, never decoded as NULL.
func TestLayoutMissingFromRowImage(t *testing.T) {
	tb := seedTable(t)
	r := newTestReader(t, tb, &fakeSchema{})
	lay, err := r.layoutFor(context.Background(), tb, tableMap(true, cID, cMsgID, cEx, cRK, cBody, cStatus))
	if err != nil {
		t.Fatal(err)
	}
	if col, ok := lay.missingFrom([]byte{0b111111}); !ok {
		t.Fatalf("full image: %s reported missing", col)
	}
	// status (column 6) defaulted, so MINIMAL left it out.
	if col, ok := lay.missingFrom([]byte{0b011111}); ok || col != "status" {
		t.Fatalf("image without status: got %q, %v; want status reported", col, ok)
	}
	if col, ok := lay.missingFrom(nil); ok || !slices.Contains(lay.names, col) {
		t.Fatalf("empty bitmap: got %q, %v; want one of the columns read (%v) reported", col, ok, lay.names)
	}
}

// Columns of the same type swapped or resized by an ALTER: without names in
// the binlog, the VARCHAR byte length and nullability in the TABLE_MAP are
// checked against the schema too.
func TestLayoutFallbackRefusesAReshapedColumn(t *testing.T) {
	tb := seedTable(t)
	yes, no := true, false
	cols := func() []Column {
		out := schemaOf(cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated)
		for i := range out {
			out[i].Nullable = &no
		}
		out[1].OctetLength, out[2].OctetLength, out[3].OctetLength, out[5].OctetLength = 256, 1020, 1020, 64
		return out
	}
	tme := tableMap(false, cID, cMsgID, cEx, cRK, cBody, cStatus, cCreated)
	tme.NullBitmap = []byte{0} // no column nullable
	for name, c := range map[string]struct {
		change func([]Column)
		want   string
	}{
		"agree":          {func([]Column) {}, ""},
		"resized":        {func(c []Column) { c[1].OctetLength = 1020 }, "column 2 (message_id) holds up to 1020 bytes"},
		"made nullable":  {func(c []Column) { c[5].Nullable = &yes }, "column 6 (status) is nullable=true"},
		"length unknown": {func(c []Column) { c[1].OctetLength = 0; c[1].Nullable = nil }, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cs := cols()
			c.change(cs)
			fake := &fakeSchema{}
			fake.set(cs)
			_, err := newTestReader(t, tb, fake).layoutFor(context.Background(), tb, tme)
			if c.want == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "binlog_row_metadata=FULL")) {
				t.Fatalf("error %v, want %q and the fix", err, c.want)
			}
		})
	}
}

func TestMySQLJSONText(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":1,"b":[1,2,{"c":null}]}`: `{"a": 1, "b": [1, 2, {"c": null}]}`,
		`{"k,:":"v:,\"x,y\"","n":1.0}`: `{"k,:": "v:,\"x,y\"", "n": 1.0}`,
		`"a\\":1`:                      `"a\\": 1`,
		`[]`:                           `[]`,
		`{}`:                           `{}`,
		`"plain"`:                      `"plain"`,
	} {
		if got := mysqlJSONText(in); got != want {
			t.Errorf("mysqlJSONText(%s) = %s, want %s", in, got, want)
		}
	}
	if got := mysqlJSONText([]byte(`[1,2]`)); string(got.([]byte)) != `[1, 2]` {
		t.Errorf("bytes: %s", got)
	}
	if got := setText(0b1011, []string{"a", "b", "c", "d"}); got != "a,b,d" {
		t.Errorf("setText = %q", got)
	}
}
