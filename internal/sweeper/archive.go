package sweeper

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// archive moves or deletes SENT rows past the retention, when the replica
// says there are any (by the primary's clock, like the delete).
func (s *Sweeper) archive(ctx context.Context, p *plan, log *zap.Logger) {
	a := s.cfg.Archive
	q, args := p.ArchiveLookSQL(a.Retention)
	var found bool
	if err := s.precheck(ctx, q, args, &found); err != nil {
		if ctx.Err() == nil {
			log.Warn("archive pre-check on the replica failed", zap.Error(err))
		}
		return
	}
	if !found {
		return
	}
	start := time.Now()
	// Archiving stops at once on shutdown: each batch is its own
	// transaction, so stopping between them loses nothing.
	total, batches, err := inBatches(ctx, a.BatchSize, a.Pause, func() (int64, error) {
		var n int64
		err := retryLocks(ctx, func() error {
			var err error
			n, err = s.archiveBatch(ctx, p)
			return err
		})
		s.progressed(time.Now())
		return n, err
	})
	if err != nil && ctx.Err() == nil {
		log.Warn("archiving failed; next archive round retries", zap.Error(err), zap.Int64("rows", total))
	}
	if total > 0 {
		log.Info("archived SENT rows", zap.String("mode", a.Mode), zap.Int64("rows", total), zap.Int("batches", batches),
			zap.Duration("retention", a.Retention), zap.Duration("took", time.Since(start)))
	}
}

// archiveBatch moves or deletes one batch in its own short transaction.
func (s *Sweeper) archiveBatch(ctx context.Context, p *plan) (int64, error) {
	a := s.cfg.Archive
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if a.Mode == ArchiveDelete {
			q, args := p.ArchiveDeleteSQL(a.Retention, a.BatchSize)
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				return fmt.Errorf("deleting SENT rows: %w", err)
			}
			n, err = res.RowsAffected()
			return err
		}
		q, args := p.ArchiveSelectSQL(a.Retention, a.BatchSize)
		rs, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("locking SENT rows to archive: %w", err)
		}
		var ids []any
		for rs.Next() {
			var id any
			if err := rs.Scan(&id); err != nil {
				rs.Close()
				return err
			}
			ids = append(ids, id)
		}
		rs.Close()
		if err := rs.Err(); err != nil || len(ids) == 0 {
			return err
		}
		res, err := tx.ExecContext(ctx, p.ArchiveCopySQL(len(ids)), ids...)
		if err != nil {
			return fmt.Errorf("copying %d rows to %s: %w", len(ids), p.ArchiveTable, err)
		}
		if copied, _ := res.RowsAffected(); copied != int64(len(ids)) {
			return fmt.Errorf("copied %d of %d rows to %s", copied, len(ids), p.ArchiveTable)
		}
		if res, err = tx.ExecContext(ctx, p.DeleteIDsSQL(len(ids)), ids...); err != nil {
			return fmt.Errorf("deleting %d archived rows: %w", len(ids), err)
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
