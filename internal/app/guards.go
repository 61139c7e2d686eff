package app

// The App's guards at start: one relay per name and per source.server_id
// (internal/instance) and the gap policy (internal/startpos), wired from
// the config, the Redis client and the source at first use, which is after
// Open and after cmd set AcceptGap.

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/instance"
	"github.com/binlog-relay/binlog-relay/internal/startpos"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

type guards struct {
	once      sync.Once
	heartbeat *instance.Heartbeat
	serverIDs *instance.ServerIDs
	gaps      *startpos.Gaps
}

func (g *guards) init(a *App) {
	g.once.Do(func() {
		cfg := a.Cfg
		ic := instance.Config{
			Name: cfg.Name, ServerID: cfg.Source.ServerID, HA: cfg.HA.Enabled,
			InstanceKey: cfg.RedisKeys().Instance(), LeaderKey: cfg.RedisKeys().Leader(),
			CheckpointKey: cfg.Checkpoint.Key,
		}
		src := appSource{a}
		g.heartbeat = instance.NewHeartbeat(ic, a.Redis, &a.notice, a.Log)
		g.serverIDs = instance.NewServerIDs(ic, a.Redis, src, a.Log)
		g.gaps = startpos.New(startpos.Config{
			Name: cfg.Name, CheckpointKey: cfg.Checkpoint.Key, Tables: cfg.Tables,
			SweeperEnabled: cfg.SweeperEnabled(), AcceptGap: a.AcceptGap,
		}, startpos.Deps{Redis: a.Redis, Source: src, Saved: func() (time.Time, bool) {
			if r := a.Relay(); r != nil {
				if cp, ok := r.LastCheckpoint(); ok {
					return cp.SavedAt, true
				}
			}
			return time.Time{}, false
		}, Metrics: a.Metrics, Notice: &a.notice, Log: a.Log})
	})
}

// heartbeat is the relay name's heartbeat key.
func (a *App) heartbeat() *instance.Heartbeat { a.guard.init(a); return a.guard.heartbeat }

// serverIDs finds other replicas of the source with this source.server_id.
func (a *App) serverIDs() *instance.ServerIDs { a.guard.init(a); return a.guard.serverIDs }

// gaps is the gap policy.
func (a *App) gaps() *startpos.Gaps { a.guard.init(a); return a.guard.gaps }

// appSource is the App's source as instance and startpos read it.
type appSource struct{ a *App }

func (s appSource) DB() *sql.DB  { return s.a.Source }
func (s appSource) Addr() string { return s.a.sourceAddr() }
func (s appSource) Flavor(ctx context.Context) (string, error) {
	return s.a.Flavor(ctx)
}
func (s appSource) CurrentPosition(ctx context.Context) (binlog.Position, error) {
	return s.a.CurrentPosition(ctx)
}
