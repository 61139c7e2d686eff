package outboxsql

import (
	"fmt"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The reads reconcile runs over a table's rows, on a replica: a chunk of
// rows with what it judges them by, and a lookup by message id.

// LookupSQL reads the rows whose column col is one of n values: their id,
// then col when it is another column. cols are the columns it reads, in
// order.
func LookupSQL(t *outbox.Table, col string, n int) (query string, cols []string) {
	cols = []string{t.Columns.ID}
	if col != t.Columns.ID {
		cols = append(cols, col)
	}
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s)", quoteAll(cols), QuotedName(t), q(col), ident.Placeholders(n)), cols
}

// ReconcileChunkSQL reads, in id order, the rows created in a window and
// within keyRange (a condition on the id, its arguments after the window's):
// cols, then status (NULL without a status column), version (0 without
// one), "sent recently" and "created before a bound". Its arguments are the
// "recently" bound (with updated_at, two: updated_at's, then created_at's,
// which stands in for a NULL updated_at), the created-before bound, the
// window's start and end, keyRange's, and the limit.
func ReconcileChunkSQL(t *outbox.Table, cols []string, keyRange string) string {
	c := t.Columns
	status, version := "NULL", "0"
	if c.Status != "" {
		status = q(c.Status)
	}
	if c.Version != "" {
		version = q(c.Version)
	}
	recent := q(c.CreatedAt) + " >= ?"
	if c.UpdatedAt != "" {
		// A NULL updated_at (the seed's DDL allows it) falls back on created_at.
		recent = fmt.Sprintf("COALESCE(%s >= ?, %s >= ?)", q(c.UpdatedAt), q(c.CreatedAt))
	}
	return fmt.Sprintf("SELECT %[1]s, %[2]s, %[3]s, %[4]s, %[5]s < ? FROM %[6]s WHERE %[5]s >= ? AND %[5]s < ? AND %[7]s ORDER BY %[8]s LIMIT ?",
		quoteAll(cols), status, version, recent, q(c.CreatedAt), QuotedName(t), keyRange, q(c.ID))
}
