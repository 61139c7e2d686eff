package discover

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// Property: whatever the table, init either refuses it naming exactly what
// the relay lacks (a one-column key, a payload column), or proposes a
// mapping that names only columns the table has, gives no column two
// roles, writes status values the column can take, validates, and loads
// back from the config it renders as the same table.
func TestProposeProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		tb := drawTable(rt)
		p, err := Propose(tb)
		checkProposal(rt, tb, p, err)
	})
}

// role is a notion a generated column stands for: the names and types it
// is drawn from.
type role struct {
	names []string
	types []string
}

var roles = []role{
	{[]string{"id", "event_id", "pk"}, []string{"bigint", "int", "char(36)", "varchar(64)", "bigint unsigned"}},
	{messageIDNames, []string{"varchar(64)", "char(36)", "bigint", "text"}},
	{exchangeNames, []string{"varchar(100)", "char(20)", "text", "int"}},
	{routingKeyNames, []string{"varchar(100)", "enum('a.b','c')", "text"}},
	{append(payloadNames, "blob_col", "doc"), []string{"text", "longtext", "json", "longblob", "varchar(2000)", "int", "datetime"}},
	{statusNames, []string{"varchar(16)", "tinyint", "int", "enum", "text", "datetime"}},
	{retryCountNames, []string{"int", "varchar(8)"}},
	{maxRetryNames, []string{"int"}},
	{nextRetryNames, []string{"datetime", "timestamp", "bigint"}},
	{errorNames, []string{"text", "varchar(1024)", "int"}},
	{createdNames, []string{"datetime", "timestamp", "bigint", "varchar(30)"}},
	{updatedNames, []string{"datetime", "timestamp"}},
	{versionNames, []string{"int", "bigint", "varchar(4)"}},
	{headersNames, []string{"json", "text", "int"}},
	{headerNames, []string{"varchar(64)", "int"}},
	{[]string{"amount", "note", "remark", "x", "traceparent", "tracestate", "tracingspancontext"}, []string{"decimal(10,2)", "varchar(255)", "text", "datetime"}},
}

var stateVocabulary = []string{"PENDING", "NEW", "SENDING", "SENT", "DONE", "FAILED", "DEAD", "ON_HOLD", "pending", "sent", "it's", "0", "1", "2", "9"}

func drawTable(rt *rapid.T) *Table {
	tb := &Table{Schema: "shop", Name: "t", Values: map[string][]string{}}
	seen := map[string]bool{}
	for i, r := range roles {
		for range rapid.IntRange(0, 2).Draw(rt, fmt.Sprintf("n%d", i)) {
			name := rapid.SampledFrom(r.names).Draw(rt, "name")
			if rapid.Bool().Draw(rt, "upper") {
				name = strings.ToUpper(name)
			}
			if seen[strings.ToLower(name)] {
				continue
			}
			seen[strings.ToLower(name)] = true
			tb.Columns = append(tb.Columns, drawColumn(rt, name, rapid.SampledFrom(r.types).Draw(rt, "type")))
		}
	}
	if len(tb.Columns) == 0 {
		tb.Columns = append(tb.Columns, drawColumn(rt, "x", "int"))
	}
	cols := func() []string {
		var out []string
		for _, c := range tb.Columns {
			out = append(out, c.Name)
		}
		return out
	}()
	switch rapid.IntRange(0, 3).Draw(rt, "key") {
	case 1:
		tb.Indexes = append(tb.Indexes, Index{Name: "PRIMARY", Unique: true, Columns: []string{rapid.SampledFrom(cols).Draw(rt, "pk")}})
	case 2:
		if len(cols) >= 2 {
			tb.Indexes = append(tb.Indexes, Index{Name: "PRIMARY", Unique: true, Columns: cols[:2]})
		}
	case 3:
		tb.Indexes = append(tb.Indexes, Index{Name: "uk", Unique: true, Columns: []string{rapid.SampledFrom(cols).Draw(rt, "uk")}})
	}
	if rapid.Bool().Draw(rt, "second_unique") {
		tb.Indexes = append(tb.Indexes, Index{Name: "uk2", Unique: rapid.Bool().Draw(rt, "unique2"), Columns: []string{rapid.SampledFrom(cols).Draw(rt, "uk2col")}})
	}
	for i, c := range tb.Columns {
		if pk := tb.primaryKey(); slices.Contains(pk, c.Name) {
			tb.Columns[i].Nullable = false
		}
		if statusName(c.Name) > 0 || (createdName(c.Name) > 0 && c.integer()) {
			if rapid.Bool().Draw(rt, "sampled") {
				tb.Values[strings.ToLower(c.Name)] = rapid.SliceOfNDistinct(rapid.SampledFrom(append(stateVocabulary, "1718000000123")), 0, 4, rapid.ID[string]).Draw(rt, "values")
			}
		}
	}
	return tb
}

func drawColumn(rt *rapid.T, name, typ string) Column {
	c := Column{Name: name, Nullable: rapid.Bool().Draw(rt, "nullable")}
	if typ == "enum" {
		vals := rapid.SliceOfNDistinct(rapid.SampledFrom(stateVocabulary), 1, 4, rapid.ID[string]).Draw(rt, "enum")
		var q []string
		for _, v := range vals {
			q = append(q, "'"+strings.ReplaceAll(v, "'", "''")+"'")
		}
		typ = "enum(" + strings.Join(q, ",") + ")"
	}
	c.ColumnType = typ
	c.DataType = strings.Fields(strings.SplitN(typ, "(", 2)[0])[0]
	if rapid.Bool().Draw(rt, "has_default") {
		d := rapid.SampledFrom(stateVocabulary).Draw(rt, "default")
		c.Default = &d
	}
	if rapid.Bool().Draw(rt, "has_comment") {
		c.Comment = rapid.SampledFrom([]string{"0-待发送 1-已发送 2-发送失败", "0 new, 1 sent, 9 dead", "PENDING/SENT/FAILED", "1: done", "anything"}).Draw(rt, "comment")
	}
	return c
}

// checkProposal is the property's invariant.
func checkProposal(t fataler, tb *Table, p *Proposal, err error) {
	t.Helper()
	keyOK := len(tb.primaryKey()) == 1
	if len(tb.primaryKey()) == 0 {
		for _, i := range tb.Indexes {
			if c, ok := tb.column(i.Columns[0]); ok && i.Unique && len(i.Columns) == 1 && !c.Nullable {
				keyOK = true
			}
		}
	}
	if err != nil {
		u, ok := errors.AsType[*UnmappableError](err)
		if !ok || len(u.Missing) == 0 {
			t.Fatalf("refused without naming what is missing: %v", err)
		}
		missingKey := strings.HasPrefix(u.Missing[0], "no primary key") || strings.HasPrefix(u.Missing[0], "no single-column primary key")
		if missingKey == keyOK {
			t.Fatalf("key said missing %v, but the table's key is usable: %v (%v)", missingKey, keyOK, err)
		}
		for _, m := range u.Missing[btoi(missingKey):] {
			if !strings.HasPrefix(m, "no payload column") {
				t.Fatalf("missing %q", m)
			}
		}
		if id := tb.primaryKey(); keyOK && len(id) == 1 {
			for _, c := range tb.Columns {
				if normal(c.Name) == "payload" && c.textual() && !strings.EqualFold(c.Name, id[0]) {
					t.Fatalf("a text column named payload, and refused: %v", err)
				}
			}
		}
		return
	}
	if !keyOK {
		t.Fatalf("mapped a table without a usable key: %+v", p.Table.Columns)
	}
	tbl := p.Table
	if err := tbl.Validate("t"); err != nil {
		t.Fatalf("the proposal does not validate: %v", err)
	}
	for field, col := range tbl.MappedColumns() {
		if _, ok := tb.column(col); !ok {
			t.Fatalf("%s names %q, which the table lacks", field, col)
		}
	}
	c := tbl.Columns
	roles := map[string]string{}
	for field, col := range map[string]string{"payload": c.Payload, "status": c.Status, "exchange": c.Exchange, "routing_key": c.RoutingKey,
		"retry_count": c.RetryCount, "max_retry_count": c.MaxRetryCount, "next_retry_time": c.NextRetryTime, "error": c.Error,
		"created_at": c.CreatedAt, "updated_at": c.UpdatedAt, "version": c.Version, "id": c.ID} {
		if col == "" {
			continue
		}
		if other, dup := roles[strings.ToLower(col)]; dup && p.Preset == "" {
			t.Fatalf("column %q is both %s and %s", col, other, field)
		}
		roles[strings.ToLower(col)] = field
	}
	if c.MessageID != "" && !strings.EqualFold(c.MessageID, c.ID) && roles[strings.ToLower(c.MessageID)] != "" && p.Preset == "" {
		t.Fatalf("message id %q is also %s", c.MessageID, roles[strings.ToLower(c.MessageID)])
	}
	if c.Status != "" {
		sc, _ := tb.column(c.Status)
		s := tbl.Statuses
		if s.Numeric != sc.integer() {
			t.Fatalf("status column %s (%s): numeric %v", sc.Name, sc.ColumnType, s.Numeric)
		}
		for _, v := range []string{s.Pending, s.Sending, s.Sent, s.Failed} {
			if v == "" {
				continue
			}
			if s.Numeric {
				if _, err := strconv.Atoi(v); err != nil {
					t.Fatalf("numeric status value %q", v)
				}
			}
			if sc.DataType == "enum" && !slices.Contains(sc.enumValues(), v) && !noted(p, fmt.Sprintf("wrote %q, which the column cannot take", v)) {
				t.Fatalf("status value %q is not in the ENUM %s, and no note says so: the relay's write would fail", v, sc.ColumnType)
			}
		}
	}
	checkRoundTrip(t, tb, p)
}

func noted(p *Proposal, text string) bool {
	return slices.ContainsFunc(p.Notes, func(n Note) bool { return strings.Contains(n.Text, text) })
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
