package app

// Readiness (internal/ops judges it) over this App's state.

import (
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ops"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// Ready reports whether the relay is connected to the source, the broker
// and Redis with its lag under http.ready_max_lag; when not, why
// (ops.Ready). An HA standby is ready while it can reach Redis.
func (a *App) Ready() (bool, []string) {
	now := time.Now()
	s := ops.State{Standby: a.standby(), RedisUp: a.ops.redisUp.Load(), RedisEndpoint: a.Cfg.Redis.Endpoint(),
		SourceAddr: a.sourceAddr(), MaxLag: a.Cfg.HTTP.ReadyMaxLag}
	r, p := a.ops.reader.Load(), a.ops.pub.Load()
	if s.Standby || r == nil || p == nil {
		return ops.Ready(s, now)
	}
	s.Running, s.SourceConnected, s.Lag = true, r.Connected(), r.Lag(now)
	if !p.Connected() {
		s.BrokerDown = a.brokerDownReason(p) // brokernodes.go
	}
	s.Others = append(a.replica.Reasons(replicaServers{a}, a.Cfg.HTTP.ReadyMaxLag), a.notice.Reasons()...)
	if h, ok := a.holding(); ok {
		s.Hold = &h
	}
	return ops.Ready(s, now)
}

// holding is what the running relay's stream is held behind, if anything.
func (a *App) holding() (publisher.Hold, bool) {
	if rl := a.Relay(); rl != nil {
		return rl.Holding()
	}
	return publisher.Hold{}, false
}

// heldFor feeds binlog_relay_publish_held_seconds: 0 when not holding (a
// standby holds nothing, whatever its last term left behind).
func (a *App) heldFor() time.Duration {
	if a.standby() {
		return 0
	}
	if h, ok := a.holding(); ok {
		return time.Since(h.Since)
	}
	return 0
}
