package outboxsql

import (
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// QuotedName is `schema`.`table`.
func QuotedName(t *outbox.Table) string { return ident.Quote(t.Schema) + "." + ident.Quote(t.Name) }

// SQLValue renders a status value for SQL: numbers bare, strings quoted.
func SQLValue(s *outbox.Statuses, v string) string {
	if s.Numeric {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

// SQLList renders values as a comma-separated SQL list.
func SQLList(s *outbox.Statuses, vs []string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = SQLValue(s, v)
	}
	return strings.Join(parts, ", ")
}

// CreatedBefore is a SQL condition selecting rows created more than age ago,
// with its argument, whatever the created column's storage. It uses the
// server's clock, like the DEFAULT CURRENT_TIMESTAMP that filled the column.
// ok is false when the table has no created column.
func CreatedBefore(t *outbox.Table, age time.Duration) (cond string, arg any, ok bool) {
	col := t.Columns.CreatedAt
	if col == "" {
		return "", nil, false
	}
	switch t.CreatedAtEpoch {
	case "ms":
		return ident.Quote(col) + " < UNIX_TIMESTAMP(NOW(3)) * 1000 - ?", age.Milliseconds(), true
	case "s":
		return ident.Quote(col) + " < UNIX_TIMESTAMP(NOW(3)) - ?", int64(age / time.Second), true
	default:
		return ident.Quote(col) + " < NOW(3) - INTERVAL ? MICROSECOND", age.Microseconds(), true
	}
}

// RowFromSQL builds a row from the values of cols as database/sql scanned
// them (into *any), the way the binlog reader would have decoded it, so the
// router gives a row read by SQL the same message id and route as the
// binlog path. datetime[i] marks a DATETIME column: a wall clock in the
// table's zone (route.time_zone), which the driver labels UTC.
func RowFromSQL(t *outbox.Table, cols []string, vals []any, datetime []bool) *outbox.Row {
	row := &outbox.Row{Table: t, Values: make(map[string]any, len(cols))}
	for i, col := range cols {
		v := vals[i]
		if tm, ok := v.(time.Time); ok && datetime[i] {
			v = time.Date(tm.Year(), tm.Month(), tm.Day(), tm.Hour(), tm.Minute(), tm.Second(), tm.Nanosecond(), t.Location())
		}
		row.Values[col] = v
	}
	row.ID = row.Values[t.Columns.ID]
	if b, ok := row.ID.([]byte); ok {
		row.ID = string(b)
	}
	return row
}
