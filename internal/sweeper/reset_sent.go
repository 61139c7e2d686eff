package sweeper

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// SentRow names a SENT row to put back to PENDING: its primary key and,
// for a table with a version column, the version it was read with.
type SentRow struct {
	ID      any
	Version int64
}

// ResetSent puts SENT rows back to PENDING, due now, with their retry count
// reset, so they are sent again (what `reconcile --repair` does with rows no
// consumer recorded): the binlog path publishes a row put back to a
// publishable status at once, and the sweeper sends any it did not. A row is reset only while it is still
// SENT and, when the table has a version column, still at the version it
// was read with: a row that moved since is left alone. note goes into the
// error column when there is one. It runs on the primary, one short
// transaction per batch, and returns the ids it reset.
func ResetSent(ctx context.Context, primary *sql.DB, t *outbox.Table, rows []SentRow, note string) ([]any, error) {
	p, err := newPlan(t)
	if err != nil {
		return nil, fmt.Errorf("resetting SENT rows: %w", err)
	}
	q := p.ResetSentSQL()
	var reset []any
	for start := 0; start < len(rows); start += requeueBatch {
		batch := rows[start:min(start+requeueBatch, len(rows))]
		var done []any
		err := retryLocks(ctx, func() error {
			done = done[:0]
			return inTx(ctx, primary, func(tx *sql.Tx) error {
				for _, r := range batch {
					args := []any{}
					if t.Columns.Error != "" {
						args = append(args, note)
					}
					args = append(args, r.ID)
					if t.Columns.Version != "" {
						args = append(args, r.Version)
					}
					res, err := tx.ExecContext(ctx, q, args...)
					if err != nil {
						return err
					}
					if n, _ := res.RowsAffected(); n == 1 {
						done = append(done, r.ID)
					}
				}
				return nil
			})
		})
		if err != nil {
			return reset, fmt.Errorf("resetting SENT rows of %s to pending: %w", t.FullName(), err)
		}
		reset = append(reset, done...)
	}
	return reset, nil
}
