package app

// The App's guards at start: one relay per name and per source.server_id
// (internal/instance) and the gap policy (internal/startpos), wired from
// the config, the Redis client and the source at first use, which is after
// Open and after cmd set AcceptGap.

import (
	"sync"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/instance"
	"github.com/binlog-relay/binlog-relay/internal/startpos"
)

type guards struct {
	once      sync.Once
	heartbeat *instance.Heartbeat
	serverIDs *instance.ServerIDs
	gaps      *startpos.Gaps
}

// get builds the guards once, from a's config, Redis and source.
func (g *guards) get(a *App) *guards {
	g.once.Do(func() {
		cfg := a.Cfg
		ic := instance.Config{
			Name: cfg.Name, ServerID: cfg.Source.ServerID, HA: cfg.HA.Enabled,
			InstanceKey: cfg.RedisKeys().Instance(), LeaderKey: cfg.RedisKeys().Leader(),
			CheckpointKey: cfg.Checkpoint.Key,
		}
		g.heartbeat = instance.NewHeartbeat(ic, a.Redis, &a.notice, a.Log)
		g.serverIDs = instance.NewServerIDs(ic, a.Redis, a.Source, a.Log)
		g.gaps = startpos.New(startpos.Config{
			Name: cfg.Name, CheckpointKey: cfg.Checkpoint.Key, Tables: cfg.Tables,
			SweeperEnabled: cfg.SweeperEnabled(), AcceptGap: a.AcceptGap,
		}, startpos.Deps{Redis: a.Redis, Source: a.Source, Saved: func() (time.Time, bool) {
			if r := a.Relay(); r != nil {
				if cp, ok := r.LastCheckpoint(); ok {
					return cp.SavedAt, true
				}
			}
			return time.Time{}, false
		}, Metrics: a.Metrics, Notice: &a.notice, Log: a.Log})
	})
	return g
}
