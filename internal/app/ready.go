package app

// Readiness (internal/ops judges it) over this App's state.

import (
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
)

// Ready reports whether the relay is connected to the source, the broker
// and Redis with its lag under http.ready_max_lag; when not, why
// (ops.Ready). An HA standby is ready while it can reach Redis.
func (a *App) Ready() (bool, []string) {
	now := time.Now()
	s := ops.State{Standby: a.standby(), RedisUp: a.ops.redisUp.Load(), RedisEndpoint: a.Cfg.Redis.Endpoint(),
		SourceAddr: a.Source.Addr(), MaxLag: a.Cfg.HTTP.ReadyMaxLag}
	r, p := a.ops.reader.Load(), a.ops.pub.Load()
	if s.Standby || r == nil || p == nil {
		return ops.Ready(s, now)
	}
	s.Running, s.SourceConnected, s.Lag = true, r.Connected(), r.Lag(now)
	if !p.Connected() {
		s.BrokerDown = p.DownReason(a.Cfg.Broker)
	}
	s.Others = append(a.replica.Reasons(a.replicaServers(), a.Cfg.HTTP.ReadyMaxLag), a.notice.Reasons()...)
	s.Notes = a.tenants.notes() // tenants.go
	if h, ok := holding(a.Relay()); ok {
		s.Hold = &h
	}
	return ops.Ready(s, now)
}

// holding is what r's stream is held behind, if anything (r may be nil).
func holding(r *relay.Relay) (publisher.Hold, bool) {
	if r != nil {
		return r.Holding()
	}
	return publisher.Hold{}, false
}
