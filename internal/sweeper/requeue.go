package sweeper

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// RequeueFilter picks the FAILED rows an operator puts back.
type RequeueFilter struct {
	// Since keeps rows that failed within this long (by updated_at, else
	// created_at); zero means any age.
	Since time.Duration
	// IDs keeps only these primary keys; empty means all.
	IDs []string
	// Error, when set, keeps only the rows whose error column holds exactly
	// this text ("" for none): one failure group of the console.
	Error *string
}

func (f RequeueFilter) match() outboxsql.RequeueMatch {
	return outboxsql.RequeueMatch{Since: f.Since, IDs: f.IDs, Error: f.Error}
}

// RequeueCount counts the FAILED rows of t that Requeue would put back,
// on db (a dry run asks the replica: it never locks a row of the primary).
func RequeueCount(ctx context.Context, db *sql.DB, t *outbox.Table, f RequeueFilter) (int64, error) {
	p, err := newPlan(t)
	if err != nil {
		return 0, fmt.Errorf("requeue: %w", err)
	}
	q, args, err := p.RequeueCountSQL(f.match())
	if err != nil {
		return 0, err
	}
	var n int64
	if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting FAILED rows of %s: %w", t.FullName(), err)
	}
	return n, nil
}

// requeueBatch bounds the rows one requeue statement moves, so putting a
// large FAILED backlog back never holds many locks at once.
const requeueBatch = 1000

// Requeue puts FAILED rows of t back to PENDING with their retry count
// reset and next_retry_time now: the binlog path publishes the re-queue at
// once, and the sweeper takes a row still pending a grace period later
// (outboxsql's due). It runs on the primary, in batches, and returns how
// many rows moved.
func Requeue(ctx context.Context, primary *sql.DB, t *outbox.Table, f RequeueFilter) (int64, error) {
	p, err := newPlan(t)
	if err != nil {
		return 0, fmt.Errorf("requeue: %w", err)
	}
	q, args, err := p.RequeueSQL(f.match(), requeueBatch)
	if err != nil {
		return 0, err
	}
	total, _, err := inBatches(ctx, requeueBatch, 0, func() (int64, error) {
		var n int64
		err := retryLocks(ctx, func() error {
			tx, err := primary.BeginTx(ctx, readCommitted)
			if err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				_ = tx.Rollback()
				return err
			}
			n, _ = res.RowsAffected()
			return tx.Commit()
		})
		return n, err
	})
	if err != nil {
		return total, fmt.Errorf("requeueing FAILED rows of %s: %w", t.FullName(), err)
	}
	return total, nil
}
