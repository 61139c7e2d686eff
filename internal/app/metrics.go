package app

// Metrics: the App's registry, the stages it watches, the pollers behind
// the metrics that need a query, and the build (binlog_relay_build_info).

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// redisPingEvery is how often the Redis connection is probed for /readyz
// and connection_up{target="redis"}.
const redisPingEvery = 2 * time.Second

// watched is what the metrics and health endpoints read: the App's metrics and
// the stages whose state they report.
type watched struct {
	once    sync.Once
	metrics *metrics.Metrics
	reader  atomic.Pointer[binlog.Reader]
	pub     atomic.Pointer[publishers]
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
		m := metrics.NewWith(metrics.Config{Name: a.Cfg.Name, MaxLabelValues: a.Cfg.Metrics.MaxLabelValues}, log)
		b := a.Build.resolved()
		m.SetBuildInfo(b.Version, b.Commit)
		m.WatchConn(metrics.TargetRedis, metrics.ConnFunc(a.ops.redisUp.Load))
		m.WatchReady(func() bool { ok, _ := a.Ready(); return ok })
		m.WatchLeader(a.leader.is)
		m.WatchHold(a.heldFor)
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
		a.ops.metrics = m
	})
	return a.ops.metrics
}

// watch tells the metrics and /readyz which stages to look at (build calls
// it with the ones it made).
func (a *App) watch(r *binlog.Reader, p publishers) {
	a.ops.reader.Store(r)
	a.ops.pub.Store(&p)
	m := a.Metrics()
	m.WatchStream(r)
	m.WatchConn(metrics.TargetBroker, p)
	m.WatchBrokerNodes(p.connectedNodes) // brokernodes.go
}

// pollers are the loops behind the metrics that need a query. The outbox
// backlog and the queue depths are the same whichever relay of a name reads
// them: with ha.enabled only the leader does (leader.go), so standbys add no
// load and the relays of a name do not export N copies of one number.
func (a *App) pollers(m *metrics.Metrics) []func(context.Context) {
	out := []func(context.Context){a.pingRedis}
	for _, poll := range a.backlogPollers(m) {
		out = append(out, func(ctx context.Context) { a.whileLeading(ctx, poll, m.ResetBacklog) })
	}
	return out
}

// backlogPollers read the outbox backlog on the source and, with
// http.queues, the queue depths from the management API.
func (a *App) backlogPollers(m *metrics.Metrics) []func(context.Context) {
	cfg := a.Cfg
	backlog := &metrics.Backlog{DB: a.Source, Tables: cfg.Tables, Interval: cfg.HTTP.BacklogInterval,
		RatioInterval: cfg.HTTP.RetryRatioInterval, Metrics: m, Log: a.Log.Named("backlog")}
	out := []func(context.Context){func(ctx context.Context) {
		if err := backlog.Run(ctx); err != nil {
			a.Log.Warn("outbox backlog metrics are off", zap.Error(err))
		}
	}}
	if len(cfg.HTTP.Queues) > 0 {
		mgmt, err := cfg.HTTP.Management(cfg.Broker.FirstURL())
		if err != nil {
			a.Log.Warn("queue depth metrics are off", zap.Error(err))
			return out
		}
		tc, err := cfg.Broker.TLS.TLSConfig("broker")
		if err != nil {
			a.Log.Warn("queue depth metrics are off", zap.Error(err))
			return out
		}
		q := &metrics.Queues{URL: mgmt, VHost: cfg.HTTP.VHost, Names: cfg.HTTP.Queues, Interval: cfg.HTTP.QueueInterval,
			TLS: tc, Metrics: m, Log: a.Log.Named("queues")}
		out = append(out, func(ctx context.Context) {
			if err := q.Run(ctx); err != nil {
				a.Log.Warn("queue depth metrics are off", zap.Error(err))
			}
		})
	}
	return out
}

// pingRedis probes Redis and logs each change of its state once.
func (a *App) pingRedis(ctx context.Context) {
	tick := time.NewTicker(redisPingEvery)
	defer tick.Stop()
	first := true
	for {
		pctx, cancel := context.WithTimeout(ctx, redisPingEvery)
		err := a.Redis.Ping(pctx).Err()
		cancel()
		if ctx.Err() != nil {
			return
		}
		up := err == nil
		if was := a.ops.redisUp.Swap(up); was != up || first {
			if up {
				a.Log.Info("redis connected", zap.String("addr", a.Cfg.Redis.Endpoint()))
			} else {
				a.Log.Warn("redis does not answer", zap.String("addr", a.Cfg.Redis.Endpoint()), zap.Error(err))
			}
		}
		first = false
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// BuildInfo names the running build in binlog_relay_build_info.
type BuildInfo struct {
	Version string // "dev" when empty
	// Commit is the VCS revision; empty: the one Go stamped into the binary
	// (vcs.revision, "-dirty" added for a modified tree), else "unknown".
	Commit string
}

func (b BuildInfo) resolved() BuildInfo {
	if b.Version == "" {
		b.Version = "dev"
	}
	if b.Commit != "" {
		return b
	}
	b.Commit = "unknown"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" {
		b.Commit = rev
		if modified == "true" {
			b.Commit += "-dirty"
		}
	}
	return b
}
