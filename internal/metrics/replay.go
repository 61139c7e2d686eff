package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Replay is the metrics of `binlog-relay replay` (internal/replay's
// Observer), in a registry of their own: a replay process exports only
// these (and the Go runtime's), never a relay's readiness or lag beside the
// running relay's. Tables come from the config and outcomes are a fixed
// set, so the labels are bounded.
type Replay struct {
	reg   *prometheus.Registry
	rows  *prometheus.CounterVec
	total *prometheus.GaugeVec
	done  *prometheus.GaugeVec
}

// NewReplay makes the replay metrics, labelled with the relay's name like
// a relay's.
func NewReplay(name string) *Replay {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var own prometheus.Registerer = reg
	if name != "" {
		own = prometheus.WrapRegistererWith(prometheus.Labels{"name": name}, reg)
	}
	f := func(c prometheus.Collector) { own.MustRegister(c) }
	return &Replay{
		reg:   reg,
		rows:  counterVec(f, "replay_rows_total", "Rows `binlog-relay replay` settled, by outcome: published (confirmed and routed) or failed.", "table", "outcome"),
		total: gaugeVec(f, "replay_rows", "Rows in the range being replayed (over resumed runs).", "table"),
		done:  gaugeVec(f, "replay_rows_done", "Rows of the range settled so far (over resumed runs); with replay_rows, the progress.", "table"),
	}
}

// ReplayTotal sets the size of the range.
func (r *Replay) ReplayTotal(table string, total int64) {
	r.total.WithLabelValues(table).Set(float64(total))
}

// ReplayRows counts settled rows.
func (r *Replay) ReplayRows(table, outcome string, n int) {
	r.rows.WithLabelValues(table, outcome).Add(float64(n))
}

// ReplayCursor sets the rows settled so far.
func (r *Replay) ReplayCursor(table string, done int64) {
	r.done.WithLabelValues(table).Set(float64(done))
}

// Handler serves the replay metrics.
func (r *Replay) Handler() http.Handler { return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{}) }
