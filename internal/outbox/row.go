package outbox

import "time"

// Row is one inserted outbox row as decoded from the binlog: the table it
// belongs to and the values of the columns the relay needs, by column name.
// Only mapped columns are kept, so a row costs a few small values, not a
// copy of every column.
type Row struct {
	Table *Table
	// ID is the primary key value (an integer, or a string such as a UUID).
	ID     any
	Values map[string]any
	// EventTime is the binlog event's timestamp (commit time on the source,
	// second precision), for commit-to-confirm latency.
	EventTime uint32
}

// Get returns the value of a column and whether the row carries it.
func (r *Row) Get(column string) (any, bool) {
	v, ok := r.Values[column]
	return v, ok
}

// RowFromSQL builds a row from the values of cols as database/sql scanned
// them (into *any), the way the binlog reader would have decoded it, so the
// router gives a row read by SQL the same message id and route as the
// binlog path. datetime[i] marks a DATETIME column: a wall clock in the
// table's zone (route.time_zone), which the driver labels UTC.
func (t *Table) RowFromSQL(cols []string, vals []any, datetime []bool) *Row {
	row := &Row{Table: t, Values: make(map[string]any, len(cols))}
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
