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
// (outboxsql's due). It runs on the primary, in batches walked by id (each
// row is met once, however fast the rows put back fail again), and
// returns how many rows moved.
func Requeue(ctx context.Context, primary *sql.DB, t *outbox.Table, f RequeueFilter) (int64, error) {
	p, err := newPlan(t)
	if err != nil {
		return 0, fmt.Errorf("requeue: %w", err)
	}
	m := f.match()
	var total int64
	var after any
	for {
		ids, err := requeueNext(ctx, primary, p, m, after)
		if err != nil {
			return total, fmt.Errorf("requeueing FAILED rows of %s: %w", t.FullName(), err)
		}
		if len(ids) == 0 {
			return total, nil
		}
		after = ids[len(ids)-1]
		q, args, err := p.RequeueIDsSQL(m, len(ids))
		if err != nil {
			return total, err
		}
		args = append(args, ids...)
		var n int64
		err = retryLocks(ctx, func() error {
			res, err := primary.ExecContext(ctx, q, args...)
			if err != nil {
				return err
			}
			n, _ = res.RowsAffected()
			return nil
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("requeueing FAILED rows of %s: %w", t.FullName(), err)
		}
		if len(ids) < requeueBatch {
			return total, nil
		}
	}
}

// requeueNext reads the ids of the next batch of m's FAILED rows above
// after, in id order.
func requeueNext(ctx context.Context, primary *sql.DB, p *plan, m outboxsql.RequeueMatch, after any) ([]any, error) {
	q, args, err := p.RequeueNextSQL(m, after, requeueBatch)
	if err != nil {
		return nil, err
	}
	rs, err := primary.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var ids []any
	for rs.Next() {
		var id any
		if err := rs.Scan(&id); err != nil {
			return nil, err
		}
		if b, ok := id.([]byte); ok {
			// A string key compares as the column does (its collation),
			// not as binary.
			id = string(b)
		}
		ids = append(ids, id)
	}
	return ids, rs.Err()
}
