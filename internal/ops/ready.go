package ops

// Readiness: what /readyz and binlog_relay_ready say, and why not.

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/relay"
)

// HoldGrace is how long publishing may hold behind one message before
// /readyz reports it: a strict-ordering retry that succeeds on its next
// attempt is not worth a page.
const HoldGrace = 5 * time.Second

// State is what readiness is judged on, read off the running relay.
type State struct {
	// Standby is a relay with ha.enabled that does not hold the lease.
	Standby bool
	// Running: the binlog path is built (its reader and broker lanes).
	Running         bool
	SourceConnected bool
	SourceAddr      string
	// BrokerDown is the reason a broker lane is not connected; "" when
	// every lane is.
	BrokerDown    string
	RedisUp       bool
	RedisEndpoint string
	// Others are the reasons of the parts that judge themselves: the
	// source replica's health and delay, a gap or conflict going on.
	Others []string
	// Notes are said on /readyz without making the relay unready: a
	// tenant's table refused while the others flow.
	Notes  []string
	Lag    time.Duration
	MaxLag time.Duration // http.ready_max_lag
	// Hold is what publishing is held behind, if anything.
	Hold *publisher.Hold
}

// Ready reports whether the relay is connected to the source, the broker
// and Redis with its lag under http.ready_max_lag; when not, why. A
// standby is ready while it can reach Redis, where the lease is taken
// over.
func Ready(s State, now time.Time) (bool, []string) {
	if s.Standby {
		if !s.RedisUp {
			return false, []string{"standby: redis " + s.RedisEndpoint + " does not answer, so this relay cannot take the leader lease over"}
		}
		return true, nil
	}
	if !s.Running {
		return false, []string{"the binlog path is not running yet (start-up checks, or a standby waiting for the lease)"}
	}
	var why []string
	if !s.SourceConnected {
		why = append(why, "binlog stream from source "+s.SourceAddr+" is not connected")
	}
	if s.BrokerDown != "" {
		why = append(why, s.BrokerDown)
	}
	if !s.RedisUp {
		why = append(why, "redis "+s.RedisEndpoint+" does not answer")
	}
	why = append(why, s.Others...)
	if s.Lag > s.MaxLag {
		why = append(why, fmt.Sprintf("binlog lag %s is over http.ready_max_lag %s", s.Lag.Round(time.Second), s.MaxLag))
	}
	if h := s.Hold; h != nil && now.Sub(h.Since) > HoldGrace {
		why = append(why, relay.HoldReason(*h, now))
	}
	if len(why) == 0 {
		return true, s.Notes
	}
	return false, append(why, s.Notes...)
}

// ReadyText is /readyz's status and body; leader is the holder of the
// lease as a standby last read it ("" when none).
func ReadyText(standby bool, leader string, ok bool, why []string) (int, string) {
	switch {
	case ok && standby:
		if leader != "" {
			return http.StatusOK, "ready: standby, waiting for the lease (the leader is " + leader + ")\n"
		}
		return http.StatusOK, "ready: standby, waiting for the lease\n"
	case ok && len(why) > 0:
		return http.StatusOK, "ready; " + strings.Join(why, "; ") + "\n"
	case ok:
		return http.StatusOK, "ready\n"
	}
	return http.StatusServiceUnavailable, "not ready: " + strings.Join(why, "; ") + "\n"
}

// Leadership is what /leader reports.
type Leadership struct {
	Leading   bool
	HAEnabled bool
	Leader    string // the holder of the lease, "" when none
	Name      string // the relay's name
}

// LeaderText is /leader's status and body: 200 on the relay that streams,
// 503 on the others, with who leads in the body.
func LeaderText(l Leadership) (int, string) {
	switch {
	case l.Leading:
		return http.StatusOK, "leader\n"
	case !l.HAEnabled:
		return http.StatusServiceUnavailable, "not leading: the binlog path is not running yet\n"
	case l.Leader != "":
		return http.StatusServiceUnavailable, "standby: the leader is " + l.Leader + "\n"
	}
	return http.StatusServiceUnavailable, "standby: no relay named " + l.Name + " holds the lease right now\n"
}
