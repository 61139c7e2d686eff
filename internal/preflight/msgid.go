package preflight

// The start-up check of the message-id column: unique on its own, or
// consumers that deduplicate by it drop events.

import (
	"context"
	"database/sql"
	"strings"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// checkMessageIDIndexes warns about each table whose message-id column is
// not unique on its own. The relay publishes that column as the AMQP
// message id, and consumers (pkg/inbox included) deduplicate by it: two
// rows sharing a value look like one message redelivered, and the second
// event is dropped. A unique key over several columns (consumer, message_id)
// does not make the column unique, so only a one-column unique or primary
// index counts. Read on the source replica, like the other table checks.
func (c *checker) checkMessageIDIndexes(ctx context.Context, where string, db *sql.DB, tables []*outbox.Table) {
	for _, t := range tables {
		col, field := messageIDColumn(t)
		if cols, err := tableColumns(ctx, db, t); err != nil || !cols[strings.ToLower(col)] {
			continue // reported by checkTables
		}
		unique, err := uniqueOnItsOwn(ctx, db, t.Schema, t.Name, col)
		if err != nil {
			c.add(Warning, where, "reading the indexes of %s: %v", t.FullName(), err)
			continue
		}
		if !unique {
			c.add(Warning, where, "%s: column %q (%s) has no unique or primary index: several rows may share a message id; consumers that deduplicate by it will drop events (add a unique key, or map %s to a unique column such as the primary key)",
				t.FullName(), col, field, field)
		}
	}
}

// messageIDColumn is the column whose value becomes the AMQP message id,
// and the config field that names it: columns.message_id, or the row id
// when no message id column is mapped.
func messageIDColumn(t *outbox.Table) (column, field string) {
	if t.Columns.MessageID != "" {
		return t.Columns.MessageID, "columns.message_id"
	}
	return t.Columns.ID, "columns.id"
}

// uniqueOnItsOwn reports whether some unique index of schema.table has col
// as its only column.
func uniqueOnItsOwn(ctx context.Context, db *sql.DB, schema, table, col string) (bool, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM (
		SELECT INDEX_NAME FROM information_schema.STATISTICS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? AND NON_UNIQUE = 0
		GROUP BY INDEX_NAME
		HAVING COUNT(*) = 1 AND MAX(LOWER(COLUMN_NAME) = LOWER(?)) = 1) AS u`, schema, table, col).Scan(&n)
	return n > 0, err
}
