package app

// Readiness: what /readyz and binlog_relay_ready say, and why not.

import (
	"fmt"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
)

// holdGrace is how long publishing may hold behind one message before
// /readyz reports it: a strict-ordering retry that succeeds on its next
// attempt is not worth a page.
const holdGrace = 5 * time.Second

// Ready reports whether the relay is connected to the source, the broker
// and Redis with its lag under http.ready_max_lag; when not, why. An HA
// standby is ready while it can reach Redis.
func (a *App) Ready() (bool, []string) {
	if a.standby() {
		return a.standbyReady()
	}
	var why []string
	r, p := a.ops.reader.Load(), a.ops.pub.Load()
	if r == nil || p == nil {
		return false, []string{"the binlog path is not running yet (start-up checks, or a standby waiting for the lease)"}
	}
	if !r.Connected() {
		why = append(why, "binlog stream from source "+a.sourceAddr()+" is not connected")
	}
	if !p.Connected() {
		why = append(why, a.brokerDownReason(p)) // brokernodes.go
	}
	if !a.ops.redisUp.Load() {
		why = append(why, "redis "+a.Cfg.Redis.Endpoint()+" does not answer")
	}
	why = append(why, a.replica.Reasons(replicaServers{a}, a.Cfg.HTTP.ReadyMaxLag)...) // internal/replica
	why = append(why, a.gapReasons()...)                                               // gap.go
	if lag, max := r.Lag(time.Now()), a.Cfg.HTTP.ReadyMaxLag; lag > max {
		why = append(why, fmt.Sprintf("binlog lag %s is over http.ready_max_lag %s", lag.Round(time.Second), max))
	}
	if h, ok := a.holding(); ok && time.Since(h.Since) > holdGrace {
		why = append(why, relay.HoldReason(h, time.Now()))
	}
	return len(why) == 0, why
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

// standbyReady is /readyz on a standby: it serves its metrics and waits, so
// it is ready as long as it can reach Redis, where the lease is taken over.
func (a *App) standbyReady() (bool, []string) {
	if !a.ops.redisUp.Load() {
		return false, []string{"standby: redis " + a.Cfg.Redis.Endpoint() + " does not answer, so this relay cannot take the leader lease over"}
	}
	return true, nil
}
