package app

// Metrics: the App's registry, the stages it watches, the pollers behind
// the metrics that need a query, and the build (binlog_relay_build_info).

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/lanes"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// watched is what the metrics and health endpoints read: the App's metrics and
// the stages whose state they report.
type watched struct {
	once    sync.Once
	metrics *metrics.Metrics
	reader  atomic.Pointer[binlog.Reader]
	pub     atomic.Pointer[lanes.Set]
	redisUp atomic.Bool
	addr    atomic.Pointer[string]
}

// Metrics returns the App's metrics, in a registry of its own.
func (a *App) Metrics() *metrics.Metrics {
	a.ops.once.Do(func() {
		log := zap.NewNop()
		if a.Log != nil {
			log = a.Log.Named("metrics")
		}
		m := metrics.NewWith(metrics.Config{Name: a.Cfg.Name, MaxLabelValues: a.Cfg.Metrics.MaxLabelValues, MaxTableSeries: a.Cfg.Metrics.MaxTableSeries}, log)
		b := a.Build.Resolved()
		m.SetBuildInfo(b.Version, b.Commit)
		m.WatchConn(metrics.TargetRedis, metrics.ConnFunc(a.ops.redisUp.Load))
		m.WatchReady(func() bool { ok, _ := a.Ready(); return ok })
		m.WatchLeader(a.leader.Is)
		m.WatchHold(func() time.Duration { // 0 when not holding: a standby holds nothing, whatever its last term left
			if h, ok := holding(a.Relay()); ok && !a.standby() {
				return time.Since(h.Since)
			}
			return 0
		})
		m.WatchRepublished(func() uint64 {
			if p := a.ops.pub.Load(); p != nil {
				return p.Republished()
			}
			return 0
		})
		m.WatchLanes(func() []int64 {
			if r := a.Relay(); r != nil {
				return r.LaneInflight()
			}
			return nil
		})
		m.WatchUnmarked(func() int64 {
			if r := a.Relay(); r != nil && !a.standby() {
				return r.Unmarked()
			}
			return 0
		})
		a.ops.metrics = m
	})
	return a.ops.metrics
}

// watch tells the metrics and /readyz which stages to look at (build calls
// it with the ones it made).
func (a *App) watch(r *binlog.Reader, p lanes.Set) {
	a.ops.reader.Store(r)
	a.ops.pub.Store(&p)
	m := a.Metrics()
	m.WatchStream(r)
	m.WatchConn(metrics.TargetBroker, p)
	m.WatchBrokerNodes(p.ConnectedNodes)
}

// pollers are the loops behind the metrics that need a query. The outbox
// backlog and the queue depths are the same whichever relay of a name reads
// them: with ha.enabled only the leader does (ops.Leading), so standbys add no
// load and the relays of a name do not export N copies of one number.
func (a *App) pollers(m *metrics.Metrics) []func(context.Context) {
	out := []func(context.Context){func(ctx context.Context) {
		ops.PingRedis(ctx, a.Redis, a.Cfg.Redis.Endpoint(), &a.ops.redisUp, a.Log)
	}}
	var tables func() []*outbox.Table
	if m := a.Matcher(); m != nil && m.HasPatterns() {
		tables = a.tenants.current // tenants.go
	}
	for _, poll := range ops.BacklogPollers(a.Cfg, a.Source.DB(), m, a.Log, tables) {
		out = append(out, func(ctx context.Context) {
			if !a.Cfg.HA.Enabled {
				poll(ctx) // the only relay of its name
				return
			}
			a.leader.While(ctx, poll, m.ResetBacklog)
		})
	}
	return out
}
