package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
)

// Purger deletes SUCCESS rows older than Retention, in batches so that no single
// DELETE holds many locks or fills the binlog with one huge event. FAILED rows are
// kept: they are the record of what needs a human. Several Purgers may run at once;
// they just share the work.
type Purger struct {
	cfg Config
	st  store
	log *slog.Logger
}

// NewPurger returns a Purger for cfg.ConsumerName's rows; log may be nil (no logs).
func NewPurger(cfg Config, db *sql.DB, log *slog.Logger) (*Purger, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Purger{cfg: cfg, log: orDiscard(log),
		st: newStore(db, cfg.mapping(), cfg.ConsumerName)}, nil
}

// Run purges every RetentionInterval until ctx is done; errors are logged and retried
// next round.
func (p *Purger) Run(ctx context.Context) error {
	return every(ctx, p.cfg.RetentionInterval, func() {
		n, err := p.PurgeOnce(ctx)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("purging old SUCCESS rows failed", slog.String("consumer", p.cfg.ConsumerName), slog.Any("error", err))
		} else if n > 0 {
			p.log.Info("purged old SUCCESS rows", slog.String("consumer", p.cfg.ConsumerName), slog.Int64("rows", n))
		}
	})
}

// PurgeOnce deletes SUCCESS rows older than Retention, RetentionBatch at a time, and
// returns how many it deleted.
func (p *Purger) PurgeOnce(ctx context.Context) (int64, error) {
	var total int64
	for ctx.Err() == nil {
		// ORDER BY keeps DELETE ... LIMIT deterministic, which statement-based
		// replication requires.
		c := p.st.m.Columns
		mine, args := p.st.mine()
		done, at := q(c.Status)+" = 'SUCCESS' AND ", q(c.SuccessTime)
		if p.st.m.Kind == KindDedup {
			// Every row of a dedup table is a handled message.
			done, at = "", q(c.CreatedAt)
		}
		res, err := p.st.execTx(ctx, `DELETE FROM `+p.st.table+`
			WHERE `+mine+done+at+` < NOW(3) - INTERVAL ? MICROSECOND
			ORDER BY `+at+` LIMIT ?`,
			append(args, p.cfg.Retention.Microseconds(), p.cfg.RetentionBatch)...)
		if err != nil {
			return total, fmt.Errorf("deleting SUCCESS rows older than %s: %w", p.cfg.Retention, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("reading deleted row count: %w", err)
		}
		total += n
		if n < int64(p.cfg.RetentionBatch) {
			return total, nil
		}
	}
	return total, ctx.Err()
}
