package sweeper

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outbox"
)

// requeueBatch bounds the rows one requeue statement moves, so putting a
// large FAILED backlog back never holds many locks at once.
const requeueBatch = 1000

// Requeue puts FAILED rows of t back to PENDING with their retry count
// reset and next_retry_time now, so the sweeper sends them on its next
// round (the binlog path sees an UPDATE, which it does not publish). It runs
// on the primary, in batches, and returns how many rows moved.
func Requeue(ctx context.Context, primary *sql.DB, t *outbox.Table, f RequeueFilter) (int64, error) {
	p, err := newPlan(t)
	if err != nil {
		return 0, fmt.Errorf("requeue: %w", err)
	}
	q, args, err := p.requeueSQL(f, requeueBatch)
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

// Lifecycle is what `binlog-relay status` shows of a table's outbox health.
type Lifecycle struct {
	// OldestPending is the age of the oldest pending row (zero when none).
	OldestPending time.Duration
	HasPending    bool
	// Failed counts FAILED rows (-1 when the table has no failed status).
	Failed int64
	// Recent counts rows updated (created, without updated_at) in the last
	// hour; Retried3 those of them retried 3 times or more. RetryRatio is
	// Retried3/Recent (-1 without a retry_count column).
	Recent, Retried3 int64
	RetryRatio       float64
}

// ReadLifecycle reads a table's lifecycle figures, from the replica.
func ReadLifecycle(ctx context.Context, replica *sql.DB, t *outbox.Table) (Lifecycle, error) {
	l := Lifecycle{Failed: -1, RetryRatio: -1}
	p, err := newPlan(t)
	if err != nil {
		return l, err
	}
	c := t.Columns
	var age sql.NullFloat64
	var ageExpr string
	switch t.CreatedAtEpoch {
	case "ms":
		ageExpr = fmt.Sprintf("(UNIX_TIMESTAMP(NOW(3)) * 1000 - MIN(%s)) / 1000", q(c.CreatedAt))
	case "s":
		ageExpr = fmt.Sprintf("UNIX_TIMESTAMP(NOW(3)) - MIN(%s)", q(c.CreatedAt))
	default:
		ageExpr = fmt.Sprintf("TIMESTAMPDIFF(MICROSECOND, MIN(%s), NOW(3)) / 1e6", q(c.CreatedAt))
	}
	err = replica.QueryRowContext(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s", ageExpr, t.QuotedName(), p.statusIn(p.pending))).Scan(&age)
	if err != nil {
		return l, fmt.Errorf("reading the oldest pending row of %s: %w", t.FullName(), err)
	}
	if age.Valid {
		l.HasPending, l.OldestPending = true, time.Duration(age.Float64*float64(time.Second)).Round(time.Second)
	}
	if f := t.Statuses.Failed; f != "" {
		err = replica.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE %s", t.QuotedName(), p.statusIn([]string{f}))).Scan(&l.Failed)
		if err != nil {
			return l, fmt.Errorf("counting FAILED rows of %s: %w", t.FullName(), err)
		}
	}
	if c.RetryCount != "" {
		recent, arg := "", any(nil)
		if c.UpdatedAt != "" {
			recent, arg = q(c.UpdatedAt)+" >= NOW(3) - INTERVAL ? MICROSECOND", time.Hour.Microseconds()
		} else {
			var cond string
			cond, arg, _ = t.CreatedBefore(time.Hour)
			recent = "NOT (" + cond + ")"
		}
		err = replica.QueryRowContext(ctx, fmt.Sprintf("SELECT COUNT(*), COALESCE(SUM(%s >= 3), 0) FROM %s WHERE %s",
			q(c.RetryCount), t.QuotedName(), recent), arg).Scan(&l.Recent, &l.Retried3)
		if err != nil {
			return l, fmt.Errorf("reading the retry ratio of %s: %w", t.FullName(), err)
		}
		l.RetryRatio = 0
		if l.Recent > 0 {
			l.RetryRatio = float64(l.Retried3) / float64(l.Recent)
		}
	}
	return l, nil
}
