package sweeper

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Lifecycle is what `binlog-relay status` shows of a table's outbox health.
type Lifecycle struct {
	// OldestPending is the age of the oldest pending row (zero when none).
	OldestPending time.Duration
	HasPending    bool
	// Failed counts FAILED rows (-1 when the table has no failed status).
	Failed int64
	// Recent counts rows updated (created, without updated_at) within
	// outbox.RetryRatioWindow; Retried those of them retried
	// outbox.RetriedFrom times or more. RetryRatio is Retried/Recent (-1
	// without a retry_count column).
	Recent, Retried int64
	RetryRatio      float64
}

// ReadLifecycle reads a table's lifecycle figures, from the replica.
func ReadLifecycle(ctx context.Context, replica *sql.DB, t *outbox.Table) (Lifecycle, error) {
	l := Lifecycle{Failed: -1, RetryRatio: -1}
	p, err := newPlan(t)
	if err != nil {
		return l, err
	}
	var age sql.NullFloat64
	if err := replica.QueryRowContext(ctx, outboxsql.OldestAgeSQL(t, p.Pending)).Scan(&age); err != nil {
		return l, fmt.Errorf("reading the oldest pending row of %s: %w", t.FullName(), err)
	}
	if age.Valid {
		l.HasPending, l.OldestPending = true, time.Duration(age.Float64*float64(time.Second)).Round(time.Second)
	}
	if f := t.Statuses.Failed; f != "" {
		if l.Failed, err = countFailed(ctx, replica, t); err != nil {
			return l, fmt.Errorf("counting FAILED rows of %s: %w", t.FullName(), err)
		}
	}
	if t.Columns.RetryCount != "" {
		q, args := outboxsql.RetryRatioSQL(t, nil)
		if err := replica.QueryRowContext(ctx, q, args...).Scan(&l.Recent, &l.Retried); err != nil {
			return l, fmt.Errorf("reading the retry ratio of %s: %w", t.FullName(), err)
		}
		l.RetryRatio = 0
		if l.Recent > 0 {
			l.RetryRatio = float64(l.Retried) / float64(l.Recent)
		}
	}
	return l, nil
}

// countFailed counts the table's FAILED rows: the one row of a count by
// status for that status alone, none when there are none.
func countFailed(ctx context.Context, replica *sql.DB, t *outbox.Table) (int64, error) {
	var status string
	var n int64
	err := replica.QueryRowContext(ctx, outboxsql.CountByStatusSQL(t, []string{t.Statuses.Failed})).Scan(&status, &n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}
