package sweeper

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/backoff"
)

// prepare reads, from the replica, what the archive needs: the outbox
// table's columns and the archive table's, which must hold them all. A
// missing archive table is a configuration error, reported at start.
func (s *Sweeper) prepare(ctx context.Context) error {
	if s.cfg.Archive.Mode != ArchiveMove {
		return nil
	}
	for _, p := range s.plans {
		archive := ArchiveTableName(s.cfg.Archive.Table, p.T.Name)
		var cols, archiveCols []string
		err := s.persist(ctx, func() error {
			var err error
			if cols, err = columns(ctx, s.replica, p.T.Schema, p.T.Name); err != nil {
				return err
			}
			archiveCols, err = columns(ctx, s.replica, p.T.Schema, archive)
			return err
		})
		if err != nil {
			return err
		}
		if len(archiveCols) == 0 {
			return fmt.Errorf("sweeper.archive.table: %s.%s does not exist; create it before archiving %s (for the seed table: schema/producer_message_archive.sql)",
				p.T.Schema, archive, p.T.FullName())
		}
		var missing []string
		for _, c := range cols {
			if !slices.ContainsFunc(archiveCols, func(a string) bool { return strings.EqualFold(a, c) }) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("sweeper.archive.table: %s.%s lacks columns %v of %s", p.T.Schema, archive, missing, p.T.FullName())
		}
		p.ArchiveCols = cols
	}
	return nil
}

// columns lists a table's columns in order (none when it does not exist).
func columns(ctx context.Context, db *sql.DB, schema, table string) ([]string, error) {
	rs, err := db.QueryContext(ctx, `SELECT COLUMN_NAME FROM information_schema.COLUMNS
		WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION`, schema, table)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s.%s: %w", schema, table, err)
	}
	defer rs.Close()
	var out []string
	for rs.Next() {
		var c string
		if err := rs.Scan(&c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rs.Err()
}

// resetZombies puts rows stuck SENDING back to PENDING, a batch at a time.
func (s *Sweeper) resetZombies(ctx context.Context, p *plan) (int64, error) {
	q, args, ok := p.ZombieResetSQL(s.cfg.ZombieTimeout, s.cfg.BatchSize)
	if !ok {
		return 0, nil
	}
	if p.T.Columns.Error != "" && s.status != nil {
		// The note goes into the error column: cut to what it takes, so
		// strict SQL mode does not refuse the reset.
		args[0] = s.status.FitError(ctx, p.T, args[0].(string))
	}
	total, _, err := inBatches(ctx, s.cfg.BatchSize, 0, func() (int64, error) {
		var n int64
		err := retryLocks(ctx, func() error {
			return s.inTx(ctx, func(tx *sql.Tx) error {
				res, err := tx.ExecContext(ctx, q, args...)
				if err != nil {
					return err
				}
				n, err = res.RowsAffected()
				return err
			})
		})
		return n, err
	})
	return total, err
}

// archive moves or deletes SENT rows past the retention, when the replica
// says there are any.
func (s *Sweeper) archive(ctx context.Context, p *plan, log *zap.Logger) {
	a := s.cfg.Archive
	q, args := p.ArchiveLookSQL(a.Retention)
	var found bool
	if err := s.replica.QueryRowContext(ctx, q, args...).Scan(&found); err != nil {
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

// inBatches runs batch until one comes back short of size (the work is
// done), pausing between batches, and returns the rows and batches done.
func inBatches(ctx context.Context, size int, pause time.Duration, batch func() (int64, error)) (total int64, batches int, err error) {
	for {
		n, err := batch()
		if err != nil {
			return total, batches, err
		}
		total += n
		batches++
		if n < int64(size) {
			return total, batches, nil
		}
		if err := backoff.Sleep(ctx, pause); err != nil {
			return total, batches, err
		}
	}
}
