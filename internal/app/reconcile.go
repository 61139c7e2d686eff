package app

// The reconciliation `run` schedules and its start-up check; the reconcile
// command and its line in `status` are internal/command's (Env.NewReconciler
// and Env.Reports are these).

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/reconcile"
	"github.com/go-sql-driver/mysql"
)

// newReconciler connects to the consumers' inbox replicas (lazily, as
// database/sql does) and builds the reconciler; close releases them.
func (a *App) newReconciler() (*reconcile.Reconciler, func(), error) {
	var inboxes []*sql.DB
	closeAll := func() {
		for _, db := range inboxes {
			_ = db.Close()
		}
	}
	for i, c := range a.Cfg.Reconcile.Consumers {
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
	rc, err := reconcile.New(a.Cfg, a.Source, a.Primary, inboxes, a.Log.Named("reconcile"))
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return rc, closeAll, nil
}

// checkReconcile is `check`'s look at the consumers' inboxes: warnings, as
// the relay streams without them. Skipped at run's start, so that an
// unreachable consumer database does not delay it.
func (c *checker) checkReconcile(ctx context.Context) {
	a := c.a
	if len(a.Cfg.Reconcile.Consumers) == 0 || a.starting.Load() {
		return
	}
	rc, closeInboxes, err := a.newReconciler()
	if err != nil {
		c.add(Warning, "reconcile", "%v", err)
		return
	}
	defer closeInboxes()
	for _, err := range rc.Check(ctx) {
		c.add(Warning, "reconcile", "%v", err)
	}
}

func (a *App) reconcileStore() reconcile.Store {
	return reconcile.Store{Client: a.Redis, Key: a.Cfg.Reconcile.Key}
}

// reconcileService runs a reconciliation every reconcile.interval, on the
// leader only (every relay without ha is its own leader), or nil when the
// interval is 0.
func (a *App) reconcileService() service {
	every := a.Cfg.Reconcile.Interval
	if every <= 0 {
		return nil
	}
	return func(ctx context.Context) error {
		rc, closeInboxes, err := a.newReconciler()
		if err != nil {
			return err
		}
		defer closeInboxes()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			if !a.leading() {
				a.Metrics().ReconcileCleared()
				continue
			}
			a.reconcileOnce(ctx, rc)
		}
	}
}

// leading reports whether this relay holds the lease (always, without ha).
func (a *App) leading() bool {
	if !a.Cfg.HA.Enabled {
		return true
	}
	l := a.lease.Load()
	return l != nil && l.Held() == nil
}

// reconcileOnce runs one periodic reconciliation: metrics, a log line and
// the saved result for `status`.
func (a *App) reconcileOnce(ctx context.Context, rc *reconcile.Reconciler) {
	rep, err := rc.Run(ctx, reconcile.Options{Repair: a.Cfg.Reconcile.Repair})
	if ctx.Err() != nil {
		return
	}
	if serr := a.reconcileStore().Save(ctx, rep); serr != nil {
		a.Log.Warn("reconciliation result not saved for status", zap.Error(serr))
	}
	if err != nil {
		a.Log.Error("reconciliation failed", zap.Error(err))
		return
	}
	var pairs []metrics.ReconcilePair
	var missing, dups int64
	for _, t := range rep.Tables {
		for _, p := range t.Consumers {
			pairs = append(pairs, metrics.ReconcilePair{Table: t.Table, Consumer: p.Consumer, Missing: p.Missing.Count, Duplicates: p.Duplicates.Count})
			missing += p.Missing.Count
			dups += p.Duplicates.Count
		}
	}
	a.Metrics().Reconciled(pairs, rep.Differences, time.Now())
	fields := []zap.Field{zap.Int64("differences", rep.Differences), zap.Int64("missing", missing),
		zap.Int64("duplicates", dups), zap.Float64("seconds", rep.Seconds), zap.Bool("repair", rep.Repair)}
	if rep.Differences > 0 {
		a.Log.Warn("reconciliation found differences (binlog-relay status, or reconcile for the ids)", fields...)
		return
	}
	a.Log.Info("reconciliation: no differences", fields...)
}
