package command

// The reconcile command and its line in `status`.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/reconcile"
)

// Reconcile runs one reconciliation, prints its report and saves it for
// `status`. The report is returned even when the run failed part way.
func Reconcile(ctx context.Context, e Env, o ReconcileOptions, w io.Writer) (*reconcile.Report, error) {
	ro := reconcile.Options{Since: o.Since, Until: o.Until, Repair: o.Repair}
	for _, name := range o.Tables {
		t, err := config.FindTable(e.Cfg.Tables, name)
		if err != nil {
			return nil, fmt.Errorf("reconcile: --table: %w", err)
		}
		ro.Tables = append(ro.Tables, t)
	}
	rc, closeInboxes, err := e.NewReconciler()
	if err != nil {
		return nil, err
	}
	defer closeInboxes()
	rep, runErr := rc.Run(ctx, ro)
	if err := e.Reports.Save(ctx, rep); err != nil {
		e.Log.Warn("the result is not saved for status", zap.Error(err))
	}
	if o.Format == "json" {
		if err := rep.JSON(w); err != nil {
			return rep, err
		}
		return rep, runErr
	}
	rep.Text(w)
	if o.Repair && !e.Cfg.SweeperEnabled() && anyReset(rep) {
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

// reconcileStatus prints the last saved result (status).
func (e Env) reconcileStatus(ctx context.Context, w io.Writer) {
	rep, err := e.Reports.Load(ctx)
	switch {
	case errors.Is(err, reconcile.ErrNoResult):
		if len(e.Cfg.Reconcile.Consumers) > 0 {
			fmt.Fprintf(w, "reconcile    no result saved under %s yet (binlog-relay reconcile, or reconcile.interval)\n", e.Cfg.Reconcile.Key)
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
