package binlog

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// layout maps one table's binlog column positions to the columns the relay
// needs, for one TABLE_MAP event.
type layout struct {
	tme      *replication.TableMapEvent
	names    []string   // needed column names
	idx      []int      // their positions in the row image
	unsigned []bool     // integer column declared UNSIGNED
	datetime []bool     // DATETIME column: a wall-clock time without a zone
	enum     [][]string // ENUM column: its values, for turning an index into the value
	set      [][]string // SET column: its values, for turning a bitmask into the value
	json     []bool     // JSON column: binary JSON rendered as text
	// retryAt is the position of the next_retry_time column (-1: none),
	// read only to tell whether a row is due at its commit; retryDatetime
	// says it is a DATETIME. createdAt and createdDatetime are the same
	// for created_at, read only beside next_retry_time.
	retryAt, createdAt             int
	retryDatetime, createdDatetime bool
	// idCell and statusCell are the id's and the status's place in names
	// (-1: not there).
	idCell, statusCell int
}

// retryValue turns a next_retry_time value into a time.Time (a DATETIME
// is a wall clock in the table's zone) or leaves it as it is.
func (l *layout) retryValue(t *outbox.Table, v any) any {
	if tm, ok := v.(time.Time); ok && l.retryDatetime {
		return time.Date(tm.Year(), tm.Month(), tm.Day(), tm.Hour(), tm.Minute(), tm.Second(), tm.Nanosecond(), t.Location())
	}
	return v
}

// createdValue is a created_at value as a time: a DATETIME in the table's
// zone, a TIMESTAMP as it is, a number in created_at_epoch's unit; false
// for anything else (NULL, a column the table no longer has).
func (l *layout) createdValue(t *outbox.Table, values []any) (time.Time, bool) {
	if l.createdAt < 0 || l.createdAt >= len(values) {
		return time.Time{}, false
	}
	switch v := values[l.createdAt].(type) {
	case time.Time:
		if l.createdDatetime {
			return time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), t.Location()), true
		}
		return v, !v.IsZero()
	case int64:
		return epochTime(t.CreatedAtEpoch, v)
	case uint64:
		return epochTime(t.CreatedAtEpoch, int64(v))
	case int32:
		return epochTime(t.CreatedAtEpoch, int64(v))
	}
	return time.Time{}, false
}

// epochTime reads n in created_at_epoch's unit ("s" or "ms").
func epochTime(unit string, n int64) (time.Time, bool) {
	switch unit {
	case "ms":
		return time.UnixMilli(n), true
	case "s":
		return time.Unix(n, 0), true
	}
	return time.Time{}, false
}

func (l *layout) row(t *outbox.Table, values []any) *outbox.Row {
	row := &outbox.Row{Table: t, Values: make(map[string]any, len(l.names))}
	for i, name := range l.names {
		row.Values[name] = l.cell(t, values, i)
	}
	row.ID = row.Values[t.Columns.ID]
	return row
}

// cell is the value of the layout's i-th column in a row image, as the
// relay reads it.
func (l *layout) cell(t *outbox.Table, values []any, i int) any {
	v := values[l.idx[i]]
	switch {
	case l.unsigned[i]:
		v = toUnsigned(v)
	case l.datetime[i]:
		// go-mysql gives a DATETIME's wall clock in UTC; it is a time
		// in the table's zone (route.time_zone).
		if tm, ok := v.(time.Time); ok {
			v = time.Date(tm.Year(), tm.Month(), tm.Day(), tm.Hour(), tm.Minute(), tm.Second(), tm.Nanosecond(), t.Location())
		}
	case l.enum[i] != nil:
		// The binlog logs an ENUM as its 1-based index (0 is the
		// invalid-value ''); a status column compares by value.
		if n, ok := v.(int64); ok {
			if n >= 1 && int(n) <= len(l.enum[i]) {
				v = l.enum[i][n-1]
			} else {
				v = ""
			}
		}
	case l.set[i] != nil:
		// A SET is logged as a bitmask of its values; MySQL shows the
		// members joined by commas, in declaration order.
		if n, ok := v.(int64); ok {
			v = setText(uint64(n), l.set[i])
		}
	case l.json[i]:
		v = mysqlJSONText(v)
	}
	if b, ok := v.([]byte); ok {
		// go-mysql may hand out slices of the packet buffer.
		v = append([]byte(nil), b...)
	}
	return v
}

// key is the row key of a row image, and publishable whether its status
// is a publishable one, read without building the row.
func (l *layout) key(t *outbox.Table, values []any) (k rowKey, publishable bool) {
	var id, st any
	if l.idCell >= 0 {
		id = l.cell(t, values, l.idCell)
	}
	if l.statusCell >= 0 {
		st = l.cell(t, values, l.statusCell)
	}
	return keyOf(&outbox.Row{Table: t, ID: id}), t.IsPublishable(st)
}

// missingFrom checks a rows event's column bitmap (the columns its row
// images hold) against the columns the layout reads: it returns the first
// one missing and false, or "" and true when all are there.
func (l *layout) missingFrom(present []byte) (string, bool) {
	for i, at := range l.idx {
		if at>>3 >= len(present) || present[at>>3]&(1<<(at&7)) == 0 {
			return l.names[i], false
		}
	}
	return "", true
}

// has tells whether a rows event's column bitmap holds the layout's i-th
// column (false for -1, a column the layout does not have).
func (l *layout) has(present []byte, i int) bool {
	if i < 0 {
		return false
	}
	at := l.idx[i]
	return at>>3 < len(present) && present[at>>3]&(1<<(at&7)) != 0
}

// setText renders a SET bitmask as MySQL does: the members, in the order
// the column declares them, joined by commas.
func setText(mask uint64, values []string) string {
	var b strings.Builder
	for i, v := range values {
		if i < 64 && mask&(1<<i) != 0 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(v)
		}
	}
	return b.String()
}

// mysqlJSONText turns go-mysql's rendering of a binary JSON value (the
// MySQL text mode: MySQL's key order and number forms, compact) into the
// text MySQL itself prints for the column: a space after every ',' and
// ':' between tokens, as in {"a": 1, "b": [1, 2]}.
func mysqlJSONText(v any) any {
	var in []byte
	switch x := v.(type) {
	case string:
		in = []byte(x)
	case []byte:
		in = x
	default:
		return v
	}
	out := make([]byte, 0, len(in)+len(in)/8)
	inString, escaped := false, false
	for _, c := range in {
		out = append(out, c)
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ',' || c == ':'):
			out = append(out, ' ')
		}
	}
	if _, ok := v.(string); ok {
		return string(out)
	}
	return out
}

// toUnsigned reinterprets a signed decode of an UNSIGNED column: go-mysql
// decodes integers by size and leaves signedness to the caller.
func toUnsigned(v any) any {
	switch x := v.(type) {
	case int8:
		return uint8(x)
	case int16:
		return uint16(x)
	case int32:
		return uint32(x)
	case int64:
		return uint64(x)
	}
	return v
}

// neededColumns lists the columns the binlog path reads (not the
// bookkeeping ones only the status writer and the sweeper use).
func neededColumns(t *outbox.Table) []string { return t.StreamColumns() }

// layoutFor returns the column layout for a TABLE_MAP event. Column names
// come from the event itself when the source logs them
// (binlog_row_metadata=FULL, MySQL 8.0.1+ / MariaDB 10.5+), which makes an
// ALTER TABLE while streaming harmless: each row is decoded with the names
// of its own table map. Otherwise the schema read from the source is used,
// re-read when the stream passes DDL on the table, and checked against the
// event's column count and types so a schema that moved on is an error, not
// values in the wrong place.
func (r *Reader) layoutFor(ctx context.Context, t *outbox.Table, tme *replication.TableMapEvent) (*layout, error) {
	key := r.tableID(t.Schema, t.Name)
	r.layoutMu.Lock()
	cached := r.layouts[key]
	r.layoutMu.Unlock()
	if cached != nil && (cached.tme == tme || sameTableMap(cached.tme, tme)) {
		return cached, nil
	}
	meta, err := r.columnMeta(ctx, t, tme)
	if err != nil {
		return nil, err
	}
	if len(meta.names) != int(tme.ColumnCount) {
		return nil, fmt.Errorf("table %s: the binlog row has %d columns but %d column names; "+layoutFix,
			t.FullName(), tme.ColumnCount, len(meta.names))
	}
	if t.Entry != nil {
		if err := checkFit(t, meta.names); err != nil {
			return nil, err
		}
	}
	lay := meta.layout(t, tme)
	r.layoutMu.Lock()
	r.layouts[key] = lay
	r.layoutMu.Unlock()
	return lay, nil
}

// tableColumns is what a layout is built from: the column names in table
// order, and by column index which are unsigned and the values of ENUM and
// SET columns.
type tableColumns struct {
	names    []string
	unsigned map[int]bool
	enum     map[int][]string
	set      map[int][]string
}

// columnMeta reads the columns from the TABLE_MAP event, or from the schema
// source when the event carries no names.
func (r *Reader) columnMeta(ctx context.Context, t *outbox.Table, tme *replication.TableMapEvent) (tableColumns, error) {
	// Signedness is in MINIMAL metadata already, enum values only in FULL.
	meta := tableColumns{names: tme.ColumnNameString(), unsigned: tme.UnsignedMap(),
		enum: tme.EnumStrValueMap(), set: tme.SetStrValueMap()}
	if len(meta.names) > 0 {
		return meta, nil
	}
	if r.schemas == nil {
		return meta, fmt.Errorf("table %s: the source does not log column names (set binlog_row_metadata=FULL) and no schema source is configured", t.FullName())
	}
	cols, err := r.schemas.Columns(ctx, t.Schema, t.Name)
	if err != nil {
		return meta, fmt.Errorf("reading columns of %s: %w", t.FullName(), err)
	}
	if len(cols) != int(tme.ColumnCount) {
		return meta, fmt.Errorf("table %s: the binlog row has %d columns but the schema read from the source has %d; "+layoutFix,
			t.FullName(), tme.ColumnCount, len(cols))
	}
	fromSchema := meta.unsigned == nil
	if fromSchema {
		meta.unsigned = map[int]bool{}
	}
	if meta.enum == nil {
		meta.enum = map[int][]string{}
	}
	if meta.set == nil {
		meta.set = map[int][]string{}
	}
	for i, c := range cols {
		if !typeMatches(tme, i, c.DataType) {
			return meta, fmt.Errorf("table %s: column %d is %s in the schema read from the source but binlog type %d in the row (the table changed after the row was written); "+layoutFix,
				t.FullName(), i+1, c.DataType, realType(tme, i))
		}
		if why := shapeDiffers(tme, i, c); why != "" {
			return meta, fmt.Errorf("table %s: column %d (%s) %s (the table changed after the row was written); "+layoutFix,
				t.FullName(), i+1, c.Name, why)
		}
		meta.names = append(meta.names, c.Name)
		if fromSchema && c.Unsigned {
			meta.unsigned[i] = true
		}
		switch rt := realType(tme, i); {
		case c.Enum != nil && rt == mysql.MYSQL_TYPE_ENUM:
			meta.enum[i] = c.Enum
		case c.Enum != nil && rt == mysql.MYSQL_TYPE_SET:
			meta.set[i] = c.Enum
		}
	}
	return meta, nil
}

// layout picks the columns the table's mapping needs, by name.
func (meta tableColumns) layout(t *outbox.Table, tme *replication.TableMapEvent) *layout {
	pos := map[string]int{}
	for i, n := range meta.names {
		pos[strings.ToLower(n)] = i
	}
	lay := &layout{tme: tme, retryAt: -1, createdAt: -1, idCell: -1, statusCell: -1}
	if i, ok := pos[strings.ToLower(t.Columns.NextRetryTime)]; ok && t.Columns.NextRetryTime != "" {
		typ := realType(tme, i)
		lay.retryAt, lay.retryDatetime = i, typ == mysql.MYSQL_TYPE_DATETIME || typ == mysql.MYSQL_TYPE_DATETIME2
		if j, ok := pos[strings.ToLower(t.Columns.CreatedAt)]; ok && t.Columns.CreatedAt != "" {
			typ := realType(tme, j)
			lay.createdAt, lay.createdDatetime = j, typ == mysql.MYSQL_TYPE_DATETIME || typ == mysql.MYSQL_TYPE_DATETIME2
		}
	}
	for _, col := range neededColumns(t) {
		i, ok := pos[strings.ToLower(col)]
		if !ok {
			// A mapped column the table no longer has: the value is NULL
			// for this row, and routing reports it (never a crash).
			continue
		}
		typ := realType(tme, i)
		lay.names = append(lay.names, col)
		lay.idx = append(lay.idx, i)
		lay.unsigned = append(lay.unsigned, meta.unsigned[i])
		lay.datetime = append(lay.datetime, typ == mysql.MYSQL_TYPE_DATETIME || typ == mysql.MYSQL_TYPE_DATETIME2)
		var enum, set []string
		switch typ {
		case mysql.MYSQL_TYPE_ENUM:
			enum = meta.enum[i]
		case mysql.MYSQL_TYPE_SET:
			set = meta.set[i]
		}
		lay.enum = append(lay.enum, enum)
		lay.set = append(lay.set, set)
		lay.json = append(lay.json, typ == mysql.MYSQL_TYPE_JSON)
		if strings.EqualFold(col, t.Columns.ID) {
			lay.idCell = len(lay.names) - 1
		}
		if t.Columns.Status != "" && strings.EqualFold(col, t.Columns.Status) {
			lay.statusCell = len(lay.names) - 1
		}
	}
	return lay
}

// layoutFix is what to do when a row's TABLE_MAP does not match the schema
// read from the source: the row was written before a change to the table
// the relay has not passed yet. Decoding it with the new layout would put
// values in the wrong columns, so the reader stops instead.
const layoutFix = "set binlog_row_metadata=FULL on the source (MySQL 8.0.1+, MariaDB 10.5+) so column names come with each row, " +
	"or put the table back to the layout the row was written with until the relay has passed this position"

// sameTableMap tells whether two TABLE_MAP events describe the same table
// layout: every transaction logs its own, and rebuilding the layout for
// each was a tenth of the relay's CPU at one row per transaction. A table
// that changed has a different table id, column count, type, metadata or
// (with binlog_row_metadata=FULL) names; without names, DDL on the table
// drops its cached layout (noteDDL).
func sameTableMap(a, b *replication.TableMapEvent) bool {
	return a.TableID == b.TableID && a.ColumnCount == b.ColumnCount &&
		bytes.Equal(a.Schema, b.Schema) && bytes.Equal(a.Table, b.Table) &&
		bytes.Equal(a.ColumnType, b.ColumnType) && slices.Equal(a.ColumnMeta, b.ColumnMeta) &&
		bytes.Equal(a.SignednessBitmap, b.SignednessBitmap) &&
		slices.EqualFunc(a.ColumnName, b.ColumnName, bytes.Equal) &&
		slices.EqualFunc(a.EnumStrValue, b.EnumStrValue, func(x, y [][]byte) bool { return slices.EqualFunc(x, y, bytes.Equal) })
}

// realType is a column's type as declared: the binlog logs ENUM and SET as
// STRING with the real type in the high byte of the metadata.
func realType(tme *replication.TableMapEvent, i int) byte {
	typ := tme.ColumnType[i]
	if typ == mysql.MYSQL_TYPE_STRING && i < len(tme.ColumnMeta) {
		if rt := byte(tme.ColumnMeta[i] >> 8); rt == mysql.MYSQL_TYPE_ENUM || rt == mysql.MYSQL_TYPE_SET {
			return rt
		}
	}
	return typ
}

// binlogTypes are the binlog column types each information_schema DATA_TYPE
// is logged as.
var binlogTypes = map[string][]byte{
	"tinyint":    {mysql.MYSQL_TYPE_TINY},
	"smallint":   {mysql.MYSQL_TYPE_SHORT},
	"mediumint":  {mysql.MYSQL_TYPE_INT24},
	"int":        {mysql.MYSQL_TYPE_LONG},
	"integer":    {mysql.MYSQL_TYPE_LONG},
	"bigint":     {mysql.MYSQL_TYPE_LONGLONG},
	"decimal":    {mysql.MYSQL_TYPE_NEWDECIMAL, mysql.MYSQL_TYPE_DECIMAL},
	"float":      {mysql.MYSQL_TYPE_FLOAT},
	"double":     {mysql.MYSQL_TYPE_DOUBLE},
	"bit":        {mysql.MYSQL_TYPE_BIT},
	"year":       {mysql.MYSQL_TYPE_YEAR},
	"date":       {mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_NEWDATE},
	"time":       {mysql.MYSQL_TYPE_TIME, mysql.MYSQL_TYPE_TIME2},
	"datetime":   {mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_DATETIME2},
	"timestamp":  {mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIMESTAMP2},
	"char":       {mysql.MYSQL_TYPE_STRING},
	"binary":     {mysql.MYSQL_TYPE_STRING},
	"varchar":    {mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING},
	"varbinary":  {mysql.MYSQL_TYPE_VARCHAR, mysql.MYSQL_TYPE_VAR_STRING},
	"tinytext":   {mysql.MYSQL_TYPE_BLOB},
	"text":       {mysql.MYSQL_TYPE_BLOB},
	"mediumtext": {mysql.MYSQL_TYPE_BLOB},
	"longtext":   {mysql.MYSQL_TYPE_BLOB},
	"tinyblob":   {mysql.MYSQL_TYPE_BLOB},
	"blob":       {mysql.MYSQL_TYPE_BLOB},
	"mediumblob": {mysql.MYSQL_TYPE_BLOB},
	"longblob":   {mysql.MYSQL_TYPE_BLOB},
	"json":       {mysql.MYSQL_TYPE_JSON, mysql.MYSQL_TYPE_BLOB},
	"enum":       {mysql.MYSQL_TYPE_ENUM},
	"set":        {mysql.MYSQL_TYPE_SET},
}

// typeMatches reports whether column i of the event can be the column the
// schema describes. Types it does not know (spatial, MariaDB's UUID and
// INET6) are accepted.
func typeMatches(tme *replication.TableMapEvent, i int, dataType string) bool {
	want, known := binlogTypes[strings.ToLower(dataType)]
	if !known {
		return true
	}
	got := realType(tme, i)
	for _, w := range want {
		if got == w {
			return true
		}
	}
	return false
}

// shapeDiffers compares what else a TABLE_MAP tells about column i with the
// schema read from the source, so that columns of one type swapped or
// resized by an ALTER are caught too: a VARCHAR's or VARBINARY's maximum
// length in bytes (the metadata is CHARACTER_OCTET_LENGTH), and whether it
// is nullable. It returns "" when they agree or the schema does not say.
func shapeDiffers(tme *replication.TableMapEvent, i int, c Column) string {
	typ := realType(tme, i)
	if (typ == mysql.MYSQL_TYPE_VARCHAR || typ == mysql.MYSQL_TYPE_VAR_STRING) && c.OctetLength > 0 &&
		i < len(tme.ColumnMeta) && int64(tme.ColumnMeta[i]) != c.OctetLength {
		return fmt.Sprintf("holds up to %d bytes in the schema read from the source but %d in the row", c.OctetLength, tme.ColumnMeta[i])
	}
	if c.Nullable != nil && i < int(tme.ColumnCount) {
		if known, nullable := tme.Nullable(i); known && nullable != *c.Nullable {
			return fmt.Sprintf("is nullable=%v in the schema read from the source but nullable=%v in the row", *c.Nullable, nullable)
		}
	}
	return ""
}

// noteDDL runs when the stream passes a statement that may be DDL. Without
// column names in the binlog, the cached schema of an outbox table the
// statement names is dropped and read again now, at the statement's place
// in the stream, so rows after it are decoded with the new layout.
func (r *Reader) noteDDL(schema, query string) {
	if r.schemas == nil {
		return
	}
	// Without case: a statement that names another table of the same
	// letters only reads this one's columns again, which is harmless.
	q := strings.ToLower(query)
	r.tablesMu.RLock()
	named := map[tableID]*outbox.Table{}
	for key, t := range r.tables {
		// The statement's schema or one it names: with a pattern entry
		// many schemas hold a table of one name, and only the one a DDL
		// is about is read again.
		if t != nil && strings.Contains(q, strings.ToLower(t.Name)) &&
			(strings.EqualFold(schema, t.Schema) || strings.Contains(q, strings.ToLower(t.Schema))) {
			named[key] = t
		}
	}
	r.tablesMu.RUnlock()
	for key, t := range named {
		r.schemas.Forget(t.Schema, t.Name)
		r.layoutMu.Lock()
		delete(r.layouts, key)
		r.layoutMu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := r.schemas.Columns(ctx, t.Schema, t.Name); err != nil {
			// The next row of the table reads it again.
			r.schemas.Forget(t.Schema, t.Name)
		}
		cancel()
	}
}

// Column is one column of a table as a SchemaSource reads it.
type Column struct {
	Name string
	// DataType is information_schema's DATA_TYPE (varchar, bigint, enum...).
	DataType string
	Unsigned bool
	// Enum holds an ENUM or SET column's values in order.
	Enum []string
	// OctetLength is CHARACTER_OCTET_LENGTH (0 when unknown or not a
	// string column) and Nullable IS_NULLABLE (nil when unknown): checked
	// against the row's TABLE_MAP.
	OctetLength int64
	Nullable    *bool
}

// SchemaSource gives a table's columns in ordinal order.
type SchemaSource interface {
	Columns(ctx context.Context, schema, table string) ([]Column, error)
	Forget(schema, table string)
}

// InfoSchema reads columns from information_schema on the source and caches
// them until Forget.
type InfoSchema struct {
	DB    *sql.DB
	mu    sync.Mutex
	cache map[tableID][]Column // by schema and table as asked
}

// Columns returns the table's columns in ordinal order.
func (s *InfoSchema) Columns(ctx context.Context, schema, table string) ([]Column, error) {
	// information_schema compares names as the server does (exactly
	// under lower_case_table_names=0), and so does the cache: as asked.
	key := tableID{Schema: schema, Table: table}
	s.mu.Lock()
	cols, ok := s.cache[key]
	s.mu.Unlock()
	if ok {
		return cols, nil
	}
	rows, err := s.DB.QueryContext(ctx,
		`SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, COALESCE(CHARACTER_OCTET_LENGTH, 0), IS_NULLABLE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`,
		schema, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var c Column
		var colType, nullable string
		if err := rows.Scan(&c.Name, &c.DataType, &colType, &c.OctetLength, &nullable); err != nil {
			return nil, err
		}
		isNull := strings.EqualFold(nullable, "YES")
		c.Nullable = &isNull
		c.DataType = strings.ToLower(c.DataType)
		c.Unsigned = strings.Contains(strings.ToLower(colType), "unsigned")
		if c.DataType == "enum" || c.DataType == "set" {
			c.Enum = parseEnum(colType)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.cache == nil {
		s.cache = map[tableID][]Column{}
	}
	s.cache[key] = cols
	s.mu.Unlock()
	return cols, nil
}

// Forget drops a cached table.
func (s *InfoSchema) Forget(schema, table string) {
	s.mu.Lock()
	delete(s.cache, tableID{Schema: schema, Table: table})
	s.mu.Unlock()
}

// parseEnum reads the values of a COLUMN_TYPE such as enum('A','B'); a
// quote inside a value is doubled.
func parseEnum(colType string) []string {
	open := strings.IndexByte(colType, '(')
	if open < 0 {
		return nil
	}
	var (
		vals []string
		cur  strings.Builder
		in   bool
	)
	s := colType[open+1:]
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case !in && c == '\'':
			in = true
			cur.Reset()
		case in && c == '\'' && i+1 < len(s) && s[i+1] == '\'':
			cur.WriteByte('\'')
			i++
		case in && c == '\\' && i+1 < len(s):
			cur.WriteByte(s[i+1])
			i++
		case in && c == '\'':
			in = false
			vals = append(vals, cur.String())
		case in:
			cur.WriteByte(c)
		}
	}
	return vals
}
