package app

// The reconcile command, the reconciliation `run` schedules, its start-up
// check and its line in `status`.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/reconcile"
	"github.com/go-sql-driver/mysql"
)

// Reconcile runs one reconciliation, prints its report and saves it for
// `status`. The report is returned even when the run failed part way.
func (a *App) Reconcile(ctx context.Context, o ReconcileOptions, w io.Writer) (*reconcile.Report, error) {
	ro := reconcile.Options{Since: o.Since, Until: o.Until, Repair: o.Repair}
	for _, name := range o.Tables {
		t, err := config.FindTable(a.Cfg.Tables, name)
		if err != nil {
			return nil, fmt.Errorf("reconcile: --table: %w", err)
		}
		ro.Tables = append(ro.Tables, t)
	}
	rc, closeInboxes, err := a.newReconciler()
	if err != nil {
		return nil, err
	}
	defer closeInboxes()
	rep, runErr := rc.Run(ctx, ro)
	if err := a.reconcileStore().Save(ctx, rep); err != nil {
		a.Log.Warn("the result is not saved for status", zap.Error(err))
	}
	if o.Format == "json" {
		if err := rep.JSON(w); err != nil {
			return rep, err
		}
		return rep, runErr
	}
	rep.Text(w)
	if o.Repair && !a.Cfg.SweeperEnabled() && anyReset(rep) {
		fmt.Fprintln(w, "note: sweeper.enabled is false in this config: the reset rows go out when a sweeper runs (binlog-relay sweep)")
	}
	return rep, runErr
}

func anyReset(r *reconcile.Report) bool {
	for _, t := range r.Tables {
		if t.Repair != nil && t.Repair.Reset.Count > 0 {
			return true
		}
	}
	return false
}

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

// reconcileStatus prints the last saved result (status).
func (a *App) reconcileStatus(ctx context.Context, w io.Writer) {
	rep, err := a.reconcileStore().Load(ctx)
	switch {
	case errors.Is(err, reconcile.ErrNoResult):
		if len(a.Cfg.Reconcile.Consumers) > 0 {
			fmt.Fprintf(w, "reconcile    no result saved under %s yet (binlog-relay reconcile, or reconcile.interval)\n", a.Cfg.Reconcile.Key)
		}
		return
	case err != nil:
		fmt.Fprintf(w, "reconcile    %v\n", err)
		return
	}
	fmt.Fprintf(w, "reconcile    last run %s (%s ago, %.1fs): %s\n", rep.StartedAt.Format(time.RFC3339),
		time.Since(rep.StartedAt).Round(time.Second), rep.Seconds, reconcileSummary(rep))
}

// reconcileSummary is one line of counts.
func reconcileSummary(rep *reconcile.Report) string {
	var missing, dups, failed, pending, orphans, reset int64
	for _, t := range rep.Tables {
		failed += t.Failed.Count
		pending += t.PendingStale.Count
		if t.Repair != nil {
			reset += t.Repair.Reset.Count
		}
		for _, p := range t.Consumers {
			missing += p.Missing.Count
			dups += p.Duplicates.Count
			failed += p.Failed.Count
		}
	}
	for _, c := range rep.Consumers {
		orphans += c.Orphans.Count
	}
	var parts []string
	if rep.Error != "" {
		parts = append(parts, "FAILED: "+rep.Error)
	}
	parts = append(parts, fmt.Sprintf("%d differences (missing %d, duplicates %d, failed %d, pending too long %d, processed without outbox row %d)",
		rep.Differences, missing, dups, failed, pending, orphans))
	if rep.Repair {
		parts = append(parts, fmt.Sprintf("%d rows reset to pending", reset))
	}
	return strings.Join(parts, "; ")
}
