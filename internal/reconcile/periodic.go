package reconcile

// The reconciliation `run` schedules, and the connections to the
// consumers' inboxes every reconciliation reads.

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
)

// Open connects to the consumers' inbox replicas of cfg.Reconcile (lazily,
// as database/sql does) and builds the reconciler over the outbox's source
// replica and primary; close releases the inboxes.
func Open(cfg *config.Config, source, primary *sql.DB, log *zap.Logger) (*Reconciler, func(), error) {
	var inboxes []*sql.DB
	closeAll := func() {
		for _, db := range inboxes {
			_ = db.Close()
		}
	}
	for i, c := range cfg.Reconcile.Consumers {
		dc, err := c.ConsumerDriverConfig(fmt.Sprintf("reconcile.consumers[%d]", i))
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conn, err := mysql.NewConnector(dc)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("reconcile.consumers[%d] (%s): %w", i, c.Redacted(), err)
		}
		db := sql.OpenDB(conn)
		db.SetMaxOpenConns(2)
		db.SetConnMaxIdleTime(time.Minute)
		inboxes = append(inboxes, db)
	}
	rc, err := New(cfg, source, primary, inboxes, log)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return rc, closeAll, nil
}

// Periodic runs a reconciliation every Every, while Leading says this
// relay leads (every relay without ha is its own leader): metrics, a log
// line and the saved result for `status` each time.
type Periodic struct {
	Reconciler *Reconciler
	Store      Store
	Every      time.Duration
	Repair     bool // reconcile.repair
	Leading    func() bool
	Metrics    *metrics.Metrics
	Log        *zap.Logger
}

// Run runs until ctx ends.
func (p Periodic) Run(ctx context.Context) error {
	tick := time.NewTicker(p.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if !p.Leading() {
			p.Metrics.ReconcileCleared()
			continue
		}
		p.once(ctx)
	}
}

// once runs one periodic reconciliation.
func (p Periodic) once(ctx context.Context) {
	rep, err := p.Reconciler.Run(ctx, Options{Repair: p.Repair})
	if ctx.Err() != nil {
		return
	}
	if serr := p.Store.Save(ctx, rep); serr != nil {
		p.Log.Warn("reconciliation result not saved for status", zap.Error(serr))
	}
	if err != nil {
		p.Log.Error("reconciliation failed", zap.Error(err))
		return
	}
	var pairs []metrics.ReconcilePair
	var missing, dups int64
	for _, t := range rep.Tables {
		for _, c := range t.Consumers {
			pairs = append(pairs, metrics.ReconcilePair{Table: t.Table, Consumer: c.Consumer, Missing: c.Missing.Count, Duplicates: c.Duplicates.Count})
			missing += c.Missing.Count
			dups += c.Duplicates.Count
		}
	}
	p.Metrics.Reconciled(pairs, rep.Differences, time.Now())
	fields := []zap.Field{zap.Int64("differences", rep.Differences), zap.Int64("missing", missing),
		zap.Int64("duplicates", dups), zap.Float64("seconds", rep.Seconds), zap.Bool("repair", rep.Repair)}
	if rep.Differences > 0 {
		p.Log.Warn("reconciliation found differences (binlog-relay status, or reconcile for the ids)", fields...)
		return
	}
	p.Log.Info("reconciliation: no differences", fields...)
}
