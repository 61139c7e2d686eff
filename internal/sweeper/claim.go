package sweeper

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// Claimed is a row this sweeper holds; its publisher job carries it as the
// tag (publisher.Job[*Claimed]), so a result names its row without a type
// assertion.
type Claimed struct {
	row        *outbox.Row
	retries    int
	maxRetries int
	version    int64 // after the claim
}

// failure is a claimed row that could not be published.
type failure struct {
	c        *Claimed
	exchange string
	err      error
}

// sweepBatch claims up to BatchSize rows, publishes them and records the
// outcome.
func (s *Sweeper) sweepBatch(ctx context.Context, p *plan) (batchResult, error) {
	if p.mode == modeLocked {
		return s.sweepLocked(ctx, p)
	}
	var rows []*Claimed
	err := retryLocks(ctx, func() error {
		var err error
		rows, err = s.claim(ctx, p)
		return err
	})
	if err != nil || len(rows) == 0 {
		return batchResult{}, err
	}
	r := batchResult{claimed: len(rows)}
	sent, failed, err := s.publish(ctx, rows)
	if err != nil {
		// Left SENDING (or leased): a zombie reset or the lease's end gives
		// them back.
		return r, err
	}
	err = s.persist(ctx, func() error {
		return s.inTx(ctx, func(tx *sql.Tx) error {
			var err error
			r.sent, r.retrying, r.failed, err = s.finishClaim(ctx, tx, p, sent, failed)
			return err
		})
	})
	return r, err
}

// claim locks due rows and marks them claimed in one short transaction.
func (s *Sweeper) claim(ctx context.Context, p *plan) ([]*Claimed, error) {
	var rows []*Claimed
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		if rows, err = s.lockDue(ctx, tx, p); err != nil || len(rows) == 0 {
			return err
		}
		q, args := p.ClaimUpdateSQL(len(rows), s.cfg.ZombieTimeout)
		for _, c := range rows {
			args = append(args, c.row.ID)
		}
		res, err := tx.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("claiming %d rows: %w", len(rows), err)
		}
		if n, _ := res.RowsAffected(); n != int64(len(rows)) {
			// Cannot happen while we hold the locks; refuse rather than
			// publish rows we do not own.
			return fmt.Errorf("claiming %d locked rows updated %d", len(rows), n)
		}
		if p.T.Columns.Version != "" {
			for _, c := range rows {
				c.version++
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.claimedRows(p, len(rows))
	return rows, nil
}

// sweepLocked is the claim for tables with neither a SENDING value nor a
// next_retry_time: the rows stay locked in one transaction while they are
// published and settled.
func (s *Sweeper) sweepLocked(ctx context.Context, p *plan) (batchResult, error) {
	var r batchResult
	err := retryLocks(ctx, func() error {
		r = batchResult{}
		return s.inTx(ctx, func(tx *sql.Tx) error {
			rows, err := s.lockDue(ctx, tx, p)
			if err != nil || len(rows) == 0 {
				return err
			}
			s.claimedRows(p, len(rows))
			r.claimed = len(rows)
			sent, failed, err := s.publish(ctx, rows)
			if err != nil {
				return err
			}
			r.sent, r.retrying, r.failed, err = s.finishClaim(ctx, tx, p, sent, failed)
			return err
		})
	})
	return r, err
}

func (s *Sweeper) claimedRows(p *plan, n int) {
	if s.observer != nil {
		s.observer.SweeperClaims(p.T, n)
	}
}

// lockDue reads and locks up to BatchSize due rows, skipping locked ones.
func (s *Sweeper) lockDue(ctx context.Context, tx *sql.Tx, p *plan) ([]*Claimed, error) {
	q, args := p.ClaimSQL(s.grace, s.cfg.BatchSize)
	rs, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("locking due rows: %w", err)
	}
	defer rs.Close()
	types, err := rs.ColumnTypes()
	if err != nil {
		return nil, err
	}
	datetime := make([]bool, len(types))
	for i, ct := range types {
		datetime[i] = ct.DatabaseTypeName() == "DATETIME"
	}
	var out []*Claimed
	vals := make([]any, len(p.Cols))
	ptrs := make([]any, len(p.Cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rs.Next() {
		if err := rs.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("reading due rows: %w", err)
		}
		out = append(out, p.claimedRow(vals, datetime))
	}
	if err := rs.Err(); err != nil {
		return nil, fmt.Errorf("reading due rows: %w", err)
	}
	return out, nil
}

// claimedRow builds the row as the binlog path would have decoded it, so the
// router sends the same message either way.
func (p *plan) claimedRow(vals []any, datetime []bool) *Claimed {
	t := p.T
	row := outboxsql.RowFromSQL(t, p.Cols, vals, datetime)
	c := &Claimed{row: row, maxRetries: t.MaxRetries}
	if col := t.Columns.RetryCount; col != "" {
		c.retries = int(intOf(row.Values[col]))
	}
	if col := t.Columns.MaxRetryCount; col != "" {
		c.maxRetries = int(intOf(row.Values[col]))
	}
	if col := t.Columns.Version; col != "" {
		c.version = intOf(row.Values[col])
	}
	return c
}

func intOf(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case nil:
		return 0
	}
	n, _ := strconv.ParseInt(colval.ValueString(v), 10, 64)
	return n
}

// publish routes and publishes the rows, in order, and returns which were
// confirmed and which failed (unroutable, returned, nacked, too large, no
// such exchange). An error means ctx ended or the publisher stopped.
func (s *Sweeper) publish(ctx context.Context, rows []*Claimed) (sent []*Claimed, failed []failure, err error) {
	jobs := make([]publisher.Job[*Claimed], 0, len(rows))
	for _, c := range rows {
		msg, err := s.router.Route(c.row)
		if err != nil {
			failed = append(failed, failure{c: c, err: err})
			continue
		}
		jobs = append(jobs, publisher.Job[*Claimed]{Msg: msg, Tag: c})
	}
	// Feed and collect at once: the publisher takes jobs only while its
	// confirm window has room, and makes room only as results are read.
	feedCtx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	go func() {
		for _, j := range jobs {
			select {
			case s.jobs <- j:
			case <-feedCtx.Done():
				return
			}
		}
	}()
	for range jobs {
		select {
		case res := <-s.results:
			c := res.Job.Tag
			if res.Err != nil {
				failed = append(failed, failure{c: c, exchange: res.Job.Msg.Exchange, err: res.Err})
			} else {
				sent = append(sent, c)
			}
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	return sent, failed, nil
}

// finishClaim marks the confirmed rows SENT and sends the failed ones to the
// retry path, all version-checked against the claim.
func (s *Sweeper) finishClaim(ctx context.Context, ex rowstatus.Execer, p *plan, sent []*Claimed, failed []failure) (nSent, nRetrying, nFailed int, err error) {
	t := p.T
	byVersion := map[int64][]any{}
	for _, c := range sent {
		byVersion[c.version] = append(byVersion[c.version], c.row.ID)
	}
	for v, ids := range byVersion {
		n, err := s.status.MarkClaimedSent(ctx, ex, t, ids, p.Claimed, &v)
		if err != nil {
			return 0, 0, 0, err
		}
		if n < int64(len(ids)) {
			// The binlog path marked them first (it marks SENDING rows too:
			// a relay frozen or far behind publishes what the sweeper took
			// meanwhile), or another sweeper or an operator took them over
			// after a zombie reset; they were published here all the same: a
			// duplicate the consumer's inbox absorbs, and one the operator
			// sees counted.
			s.log.Warn("claimed rows changed before they were marked sent: published twice", zap.String("table", t.FullName()),
				zap.Int("rows", len(ids)), zap.Int64("marked", n))
			if s.observer != nil {
				s.observer.SweeperAlreadySent(t, len(ids)-int(n))
			}
		}
		nSent += int(n)
	}
	for _, f := range failed {
		out, err := s.status.MarkRetryOn(ctx, ex, t, rowstatus.Attempt{
			ID: f.c.row.ID, Retries: f.c.retries, MaxRetries: f.c.maxRetries, Reason: f.err.Error(),
			FromStatuses: p.Claimed, Version: f.c.version, HasVersion: t.Columns.Version != "",
			Permanent: errors.Is(f.err, router.ErrNullField),
		})
		if err != nil {
			return 0, 0, 0, err
		}
		outcome := "not recorded (the row changed meanwhile)"
		switch out {
		case rowstatus.Retrying:
			nRetrying++
			outcome = "retry scheduled"
		case rowstatus.Failed:
			nFailed++
			outcome = "FAILED"
		}
		s.log.Warn("sweeper publish failed", zap.String("table", t.FullName()), zap.String("message_id", router.MessageID(f.c.row)),
			zap.Any("id", f.c.row.ID), zap.String("exchange", f.exchange), zap.Int("retry_count", f.c.retries),
			zap.String("reason", f.err.Error()), zap.String("outcome", outcome))
	}
	return nSent, nRetrying, nFailed, nil
}
