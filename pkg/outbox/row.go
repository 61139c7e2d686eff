package outbox

// Row is one outbox row to publish as decoded from the binlog, in the
// version its transaction committed: the table it belongs to and the values
// of the columns the relay needs, by column name.
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
	// Deleted is set when the transaction that wrote the row also deleted
	// it (the Debezium outbox pattern keeps the table empty that way): the
	// row is published as last written, and there is no row left to mark.
	Deleted bool
}

// Get returns the value of a column and whether the row carries it.
func (r *Row) Get(column string) (any, bool) {
	v, ok := r.Values[column]
	return v, ok
}
