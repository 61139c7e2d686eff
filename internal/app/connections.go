package app

// Connections: the source and primary pools, the Redis client (one Redis,
// a Sentinel group or a Cluster) and the checkpoint store (opening dials
// nothing; the first use does), and what
// the relay reads off the servers before streaming: the source's flavor and
// identity, its binlog position, where to start, the primary's GTID
// position.

import (
	"time"

	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/console"
	"github.com/binlog-relay/binlog-relay/internal/redisconn"
	"github.com/binlog-relay/binlog-relay/internal/source"
)

// Open prepares connections; nothing is dialled until used.
func Open(cfg *config.Config, log *zap.Logger) (*App, error) {
	st, err := newStages(cfg) // stages.go
	if err != nil {
		return nil, err
	}
	a := &App{Cfg: cfg, stages: st}
	if cfg.HTTP.Console {
		// Every stage logs through it, so the console lists their warnings.
		a.console.errs = &console.Recorder{}
		log = a.console.errs.Tee(log)
	}
	a.Log = log
	redisconn.RouteLogs(log)
	if a.Source, err = source.Open(cfg.Source, log.Named("source")); err != nil {
		return nil, err
	}
	if a.Primary, err = source.OpenDB(cfg.Primary, "primary"); err != nil {
		return nil, err
	}
	// The sweeper, status reads and admin commands share 8; the marks'
	// sessions (relay.mark_sessions) come on top.
	a.Primary.SetMaxOpenConns(8 + st.relay.MarkSessions)
	a.Primary.SetConnMaxIdleTime(5 * time.Minute)
	if a.Redis, err = redisconn.New(cfg.Redis); err != nil {
		return nil, err
	}
	a.wire = &wiring{cfg: cfg, stages: st, log: log, source: a.Source, primary: a.Primary, metrics: a.Metrics,
		degraded: func() bool { return replicaDegraded(&a.replica, st.sweeper.GracePeriod) }}
	a.checkpoints = redisconn.NewCheckpoints(a.Redis, cfg.Redis, cfg.Checkpoint.Key, log)
	a.Store = a.checkpoints.Store()
	return a, nil
}

// Close releases the connections.
func (a *App) Close() {
	_ = a.Source.Close()
	if a.marks != nil {
		_ = a.marks.Close() // its session holds a connection of a.Primary
	}
	_ = a.Primary.Close()
	_ = a.Redis.Close()
}
