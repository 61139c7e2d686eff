package sweeper

import (
	"context"
	"database/sql"
	"time"
)

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
		s.progressed(time.Now())
		return n, err
	})
	return total, err
}
