package app

// The reconciliation `run` schedules and its start-up check; the reconcile
// command and its line in `status` are internal/command's (Env.NewReconciler
// and Env.Reports are these).

import (
	"context"

	"github.com/binlog-relay/binlog-relay/internal/lease"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/reconcile"
)

// newReconciler connects to the consumers' inbox replicas and builds the
// reconciler (reconcile.Open); close releases them.
func (a *App) newReconciler() (*reconcile.Reconciler, func(), error) {
	return reconcile.Open(a.Cfg, a.Source.DB(), a.Primary, a.Log.Named("reconcile"))
}

// checkReconcile is `check`'s look at the consumers' inboxes: warnings, as
// the relay streams without them. Skipped at run's start, so that an
// unreachable consumer database does not delay it.
func (a *App) checkReconcile(ctx context.Context, r *preflight.Report) {
	if len(a.Cfg.Reconcile.Consumers) == 0 || a.starting.Load() {
		return
	}
	rc, closeInboxes, err := a.newReconciler()
	if err != nil {
		r.Add(preflight.Warning, "reconcile", "%v", err)
		return
	}
	defer closeInboxes()
	for _, err := range rc.Check(ctx) {
		r.Add(preflight.Warning, "reconcile", "%v", err)
	}
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
		return reconcile.Periodic{Reconciler: rc, Store: reconcile.Store{Client: a.Redis, Key: a.Cfg.Reconcile.Key}, Every: every, Repair: a.Cfg.Reconcile.Repair,
			Leading: func() bool { return holdsLease(a.Cfg.HA.Enabled, a.lease.Load()) }, Metrics: a.Metrics(), Log: a.Log}.Run(ctx)
	}
}

// holdsLease reports whether the relay holds the lease l (always without
// ha).
func holdsLease(ha bool, l *lease.Lease) bool {
	return !ha || (l != nil && l.Held() == nil)
}
