package rowstatus

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Marks over many tables (database-per-tenant: one pattern entry matching
// a schema per tenant) spread a batch of confirmed rows over as many
// statements. Written as autocommit statements, each is a commit on the
// primary (a redo and binlog flush) and a transaction for every replica to
// apply. MarkSentTogether writes them in one transaction instead: one
// commit on the primary, one GTID, one transaction applied downstream.

// TableMarks are one table's marks in a group written together.
type TableMarks struct {
	Table *outbox.Table
	Marks Marks
}

// Marked is what a group's marks did in one of its tables: the rows that
// moved, or Missing, the server's answer that the table (or its schema)
// does not exist (TableMissing holds for it).
type Marked struct {
	Rows    int64
	Missing error
}

// MarkSentTogether marks the rows of several tables SENT in one
// transaction on the marks' session (its row image applies), one statement
// per table, as MarkSent would. A table that does not exist is reported in
// its Marked and the others still commit: MySQL and MariaDB roll back only
// the failed statement for "no such table" (ER_NO_SUCH_TABLE,
// ER_BAD_DB_ERROR: the table is opened before any row is touched), not the
// transaction. Any other error rolls the whole group back and is returned:
// then nothing was marked, and the caller writes the group again.
//
// The results are in the order of groups, and hold only once the
// transaction committed. A commit whose answer is lost (the connection
// broke meanwhile) may have landed: written again, its rows are no longer
// publishable and do not move twice.
func (w *Writer) MarkSentTogether(ctx context.Context, groups []TableMarks) ([]Marked, error) {
	out := make([]Marked, len(groups))
	err := w.inMarkTx(ctx, func(tx *sql.Tx) error {
		for i, g := range groups {
			q, args, ok := markSentSQL(g.Table, g.Marks)
			if !ok {
				continue
			}
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				err = fmt.Errorf("marking %d rows of %s sent: %w", len(g.Marks.IDs), g.Table.FullName(), err)
				if TableMissing(err) {
					out[i].Missing = err
					continue
				}
				return err
			}
			out[i].Rows, _ = res.RowsAffected()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// inMarkTx runs fn in a transaction on the marks' session (on the pool
// when the marks log full images) and commits it. Any error rolls it back;
// on the session, it also closes the session, as execMark does, so the next
// marks open a new one with its image set again.
func (w *Writer) inMarkTx(ctx context.Context, fn func(*sql.Tx) error) error {
	begin, onSession := w.DB.BeginTx, false
	if w.Image == ImageMinimal {
		w.session.mu.Lock()
		defer w.session.mu.Unlock()
		conn, err := w.session.open(ctx, w.DB)
		if err != nil {
			return err
		}
		if conn != nil {
			begin, onSession = conn.BeginTx, true
		}
	}
	fail := func(err error) error {
		if onSession {
			w.session.close()
		}
		return err
	}
	tx, err := begin(ctx, nil)
	if err != nil {
		return fail(fmt.Errorf("starting the marks' transaction: %w", err))
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return fail(err)
	}
	if err := tx.Commit(); err != nil {
		return fail(fmt.Errorf("committing the marks' transaction: %w", err))
	}
	return nil
}
