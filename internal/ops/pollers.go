package ops

// The loops behind the metrics that need a query: the outbox backlog on
// the source, the queue depths from the management API, Redis's ping.

import (
	"context"
	"database/sql"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// RedisPingEvery is how often the Redis connection is probed for /readyz
// and connection_up{target="redis"}.
const RedisPingEvery = 2 * time.Second

// BacklogPollers read the outbox backlog on the source (db) and, with
// http.queues, the queue depths from the management API, into m.
// tables, when not nil, lists the outbox tables now (a pattern entry's
// come and go).
func BacklogPollers(cfg *config.Config, db *sql.DB, m *metrics.Metrics, log *zap.Logger, tables func() []*outbox.Table) []func(context.Context) {
	backlog := &metrics.Backlog{DB: db, Tables: cfg.Tables, Interval: cfg.HTTP.BacklogInterval,
		RatioInterval: cfg.HTTP.RetryRatioInterval, Metrics: m, Log: log.Named("backlog"), Current: tables}
	out := []func(context.Context){func(ctx context.Context) {
		if err := backlog.Run(ctx); err != nil {
			log.Warn("outbox backlog metrics are off", zap.Error(err))
		}
	}}
	if len(cfg.HTTP.Queues) == 0 {
		return out
	}
	mgmt, err := cfg.HTTP.Management(cfg.Broker.FirstURL())
	if err != nil {
		log.Warn("queue depth metrics are off", zap.Error(err))
		return out
	}
	tc, err := cfg.Broker.TLS.TLSConfig("broker")
	if err != nil {
		log.Warn("queue depth metrics are off", zap.Error(err))
		return out
	}
	q := &metrics.Queues{URL: mgmt, VHost: cfg.HTTP.VHost, Names: cfg.HTTP.Queues, Interval: cfg.HTTP.QueueInterval,
		TLS: tc, Metrics: m, Log: log.Named("queues")}
	return append(out, func(ctx context.Context) {
		if err := q.Run(ctx); err != nil {
			log.Warn("queue depth metrics are off", zap.Error(err))
		}
	})
}

// PingRedis probes rdb every RedisPingEvery until ctx ends, keeps the
// result in up and logs each change of its state once; endpoint names it.
func PingRedis(ctx context.Context, rdb redis.UniversalClient, endpoint string, up *atomic.Bool, log *zap.Logger) {
	tick := time.NewTicker(RedisPingEvery)
	defer tick.Stop()
	first := true
	for {
		pctx, cancel := context.WithTimeout(ctx, RedisPingEvery)
		err := rdb.Ping(pctx).Err()
		cancel()
		if ctx.Err() != nil {
			return
		}
		ok := err == nil
		if was := up.Swap(ok); was != ok || first {
			if ok {
				log.Info("redis connected", zap.String("addr", endpoint))
			} else {
				log.Warn("redis does not answer", zap.String("addr", endpoint), zap.Error(err))
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
