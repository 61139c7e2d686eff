package binlog

import (
	"strings"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
)

// Diffs applied to a document as MySQL applies them (sql/json_diff.cc),
// the result rendered as go-mysql renders a committed document: MySQL's
// key order (shorter keys first, then by bytes), values' text kept.
func TestPartialJSONDiffsApply(t *testing.T) {
	const (
		rep = replication.JsonDiffOperationReplace
		ins = replication.JsonDiffOperationInsert
		rem = replication.JsonDiffOperationRemove
	)
	doc := `{"a":1,"bb":[1,2.0,"x"],"note":"d\"q","nested":{"k":true}}`
	for _, tc := range []struct {
		name  string
		diffs []rawDiff
		want  string
	}{
		{"replace a member", []rawDiff{{op: rep, path: "$.a", value: `"committed"`}},
			`{"a":"committed","bb":[1,2.0,"x"],"note":"d\"q","nested":{"k":true}}`},
		{"insert a member in key order", []rawDiff{{op: ins, path: "$.zz", value: `5`}, {op: ins, path: "$.b", value: `null`}},
			`{"a":1,"b":null,"bb":[1,2.0,"x"],"zz":5,"note":"d\"q","nested":{"k":true}}`},
		{"remove a member", []rawDiff{{op: rem, path: "$.note"}},
			`{"a":1,"bb":[1,2.0,"x"],"nested":{"k":true}}`},
		{"array elements: replace, insert, append past the end, remove", []rawDiff{
			{op: rep, path: "$.bb[1]", value: `7`}, {op: ins, path: "$.bb[0]", value: `0`}, {op: ins, path: "$.bb[9]", value: `"end"`},
			{op: rem, path: "$.bb[3]"}},
			`{"a":1,"bb":[0,1,7,"end"],"note":"d\"q","nested":{"k":true}}`},
		{"nested and quoted paths, an object value", []rawDiff{
			{op: ins, path: `$.nested."a key"`, value: `{"b":1,"aa":[]}`}, {op: rep, path: `$."nested".k`, value: `false`}},
			`{"a":1,"bb":[1,2.0,"x"],"note":"d\"q","nested":{"k":false,"a key":{"b":1,"aa":[]}}}`},
		{"4-byte UTF-8 kept as it is", []rawDiff{{op: rep, path: "$.a", value: `"Zoë 😀"`}},
			`{"a":"Zoë 😀","bb":[1,2.0,"x"],"note":"d\"q","nested":{"k":true}}`},
		{"the whole document", []rawDiff{{op: rep, path: "$", value: `[1]`}}, `[1]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := applyDiffs(doc, tc.diffs)
			if err != nil || got != tc.want {
				t.Fatalf("got %s, %v\nwant %s", got, err, tc.want)
			}
		})
	}
	for _, bad := range []struct {
		before any
		diff   rawDiff
		want   string
	}{
		{nil, rawDiff{op: rep, path: "$.a", value: "1"}, "no document"},
		{doc, rawDiff{op: rep, path: "$.missing", value: "1"}, "no such member"},
		{doc, rawDiff{op: ins, path: "$.a", value: "1"}, "there already"},
		{doc, rawDiff{op: rep, path: "$.a[0]", value: "1"}, "does not fit"},
		{doc, rawDiff{op: rep, path: "$.*", value: "1"}, "wildcard"},
		{doc, rawDiff{op: rep, path: "$.bb[last]", value: "1"}, "not an index"},
	} {
		if _, err := applyDiffs(bad.before, []rawDiff{bad.diff}); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%v %s %s: %v; want an error saying %q", bad.before, bad.diff.op, bad.diff.path, err, bad.want)
		}
	}
}

// The byte length of each kind of column value in a row image, as go-mysql
// decodes them (the walk to a partial column's diffs relies on it).
func TestRowImageValueLengths(t *testing.T) {
	for _, tc := range []struct {
		tp   byte
		meta uint16
		data []byte
		want int
	}{
		{mysql.MYSQL_TYPE_LONGLONG, 0, nil, 8},
		{mysql.MYSQL_TYPE_LONG, 0, nil, 4},
		{mysql.MYSQL_TYPE_NEWDECIMAL, 10<<8 | 2, nil, 5},   // DECIMAL(10,2): 8 integral digits in 4 bytes, 2 in 1
		{mysql.MYSQL_TYPE_NEWDECIMAL, 20<<8 | 10, nil, 10}, // 10 and 10: 4+1 each
		{mysql.MYSQL_TYPE_DATETIME2, 3, nil, 7},
		{mysql.MYSQL_TYPE_TIMESTAMP2, 6, nil, 7},
		{mysql.MYSQL_TYPE_TIME2, 0, nil, 3},
		{mysql.MYSQL_TYPE_BIT, 1<<8 | 3, nil, 2},
		{mysql.MYSQL_TYPE_VARCHAR, 64 * 4, []byte{3, 0}, 5},       // 256 bytes: a 2-byte length
		{mysql.MYSQL_TYPE_VARCHAR, 16 * 4, []byte{3}, 4},          // 64 bytes: a 1-byte length
		{mysql.MYSQL_TYPE_STRING, 0xfe<<8 | 40, []byte{2}, 3},     // CHAR(10) utf8mb4
		{mysql.MYSQL_TYPE_STRING, 0xf7<<8 | 1, nil, 1},            // ENUM, 1 byte
		{mysql.MYSQL_TYPE_STRING, 0xf8<<8 | 2, nil, 2},            // SET, 2 bytes
		{mysql.MYSQL_TYPE_BLOB, 4, []byte{2, 1, 0, 0}, 4 + 258},   // LONGBLOB/LONGTEXT
		{mysql.MYSQL_TYPE_JSON, 4, []byte{5, 0, 0, 0}, 9},         // JSON
		{mysql.MYSQL_TYPE_BLOB, 2, []byte{0xff, 0xff}, 2 + 65535}, // BLOB/TEXT
	} {
		got, err := valueLength(tc.tp, tc.meta, tc.data)
		if err != nil || got != tc.want {
			t.Errorf("type %d meta %#x: %d, %v; want %d", tc.tp, tc.meta, got, err, tc.want)
		}
	}
	if _, err := valueLength(mysql.MYSQL_TYPE_DECIMAL, 0, nil); err == nil {
		t.Error("the old DECIMAL type: no error; want one (unknown to the walk)")
	}
}

// rmc__json.binlog.000001 (MySQL 8.0.22) holds a PARTIAL_UPDATE_ROWS_EVENT
// of six rows ("$.age" replaced) logged with binlog_row_image=MINIMAL: the
// walk finds each row's diff, but with no document in the before image
// the committed one cannot be rebuilt, and the column says so instead of
// holding the diff (a row of it that would be published stops the reader).
func TestFixturePartialUpdateWithoutABeforeImage(t *testing.T) {
	tb := fixtureTable(t, "mysql", "t", "id", "json_col", "name", "age")
	r, err := New(Config{Host: "x", Port: 1, User: "u", Flavor: FlavorMySQL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.tables[r.tableID(tb.Schema, tb.Name)] = tb
	var partial []*replication.RowsEvent
	p := replication.NewBinlogParser()
	p.SetFlavor(FlavorMySQL)
	p.SetVerifyChecksum(false)
	p.SetRenderJSONAsMySQLText(true)
	p.SetRowsEventDecodeFunc(r.decodeRows)
	err = p.ParseFile(fixtureDir+"/rmc__json.binlog.000001", 4, func(ev *replication.BinlogEvent) error {
		if e, ok := ev.Event.(*replication.RowsEvent); ok && ev.Header.EventType == replication.PARTIAL_UPDATE_ROWS_EVENT {
			partial = append(partial, e)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(partial) != 1 || len(partial[0].Rows) != 12 {
		t.Fatalf("%d partial update events; want one of 6 rows", len(partial))
	}
	for i := 1; i < 12; i += 2 {
		v, ok := partial[0].Rows[i][1].(*partialJSONError)
		if !ok || !strings.Contains(v.Error(), "no document") || !strings.Contains(v.Error(), "SET PERSIST binlog_row_value_options = ''") {
			t.Fatalf("after image %d's json_col: %v; want an error saying the before image has no document, and the SET to run", i/2, partial[0].Rows[i][1])
		}
	}
}
