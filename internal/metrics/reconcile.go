package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// reconcileMetrics are the findings of the periodic reconciliation
// (reconcile.interval). Labels come from the config (tables, consumer
// names), so their number is bounded. No series exists until a run
// succeeded, so a relay without reconciliation exports none and the
// staleness alert does not fire for it.
type reconcileMetrics struct {
	missing     *prometheus.GaugeVec
	duplicates  *prometheus.GaugeVec
	differences *prometheus.GaugeVec
	lastSuccess *prometheus.GaugeVec
}

func newReconcileMetrics(register func(prometheus.Collector)) reconcileMetrics {
	return reconcileMetrics{
		missing:     gaugeVec(register, "reconcile_missing", "Messages the last reconciliation found sent (outbox SENT past the grace period) but recorded by no inbox row of the consumer.", "table", "consumer"),
		duplicates:  gaugeVec(register, "reconcile_duplicates", "Messages the last reconciliation found processed more than once by the consumer (several inbox rows).", "table", "consumer"),
		differences: gaugeVec(register, "reconcile_differences", "Every finding of the last reconciliation: missing, duplicates, FAILED on either side, pending too long, processed without an outbox row."),
		lastSuccess: gaugeVec(register, "reconcile_last_success_timestamp_seconds", "Unix time at which the last reconciliation finished without an error."),
	}
}

// ReconcilePair is one outbox table and consumer in a reconciliation.
type ReconcilePair struct {
	Table, Consumer     string
	Missing, Duplicates int64
}

// Reconciled replaces the reconciliation gauges with a finished run's
// findings; pairs no longer reported lose their series.
func (m *Metrics) Reconciled(pairs []ReconcilePair, differences int64, at time.Time) {
	r := m.reconcile
	r.missing.Reset()
	r.duplicates.Reset()
	for _, p := range pairs {
		r.missing.WithLabelValues(p.Table, p.Consumer).Set(float64(p.Missing))
		r.duplicates.WithLabelValues(p.Table, p.Consumer).Set(float64(p.Duplicates))
	}
	r.differences.WithLabelValues().Set(float64(differences))
	r.lastSuccess.WithLabelValues().Set(float64(at.UnixNano()) / 1e9)
}

// ReconcileCleared drops the reconciliation series: a relay that is no
// longer the leader must not keep exporting its last findings beside the
// new leader's.
func (m *Metrics) ReconcileCleared() {
	r := m.reconcile
	r.missing.Reset()
	r.duplicates.Reset()
	r.differences.Reset()
	r.lastSuccess.Reset()
}
