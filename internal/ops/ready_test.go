package ops

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/publisher"
)

// Each way a relay can be unready gives one reason naming what to look at,
// in a fixed order; a standby is judged on Redis alone.
func TestReadyReasons(t *testing.T) {
	now := time.Now()
	up := State{Running: true, SourceConnected: true, SourceAddr: "replica:3306", RedisUp: true,
		RedisEndpoint: "redis:6379", MaxLag: time.Minute}
	held := func(d time.Duration) *publisher.Hold { return &publisher.Hold{Since: now.Add(-d)} }
	for _, c := range []struct {
		name string
		edit func(*State)
		want []string // substrings, one per reason, in order
	}{
		{"all up", func(*State) {}, nil},
		{"not running", func(s *State) { s.Running = false }, []string{"not running yet"}},
		{"standby with redis", func(s *State) { s.Standby, s.Running = true, false }, nil},
		{"standby without redis", func(s *State) { s.Standby, s.RedisUp = true, false }, []string{"standby: redis redis:6379 does not answer"}},
		{"everything down", func(s *State) {
			s.SourceConnected, s.BrokerDown, s.RedisUp = false, "broker amqp://x is not connected", false
			s.Others, s.Lag = []string{"source replica is behind"}, 2*time.Minute
		}, []string{"source replica:3306 is not connected", "broker amqp://x", "redis redis:6379 does not answer",
			"source replica is behind", "binlog lag 2m0s is over http.ready_max_lag 1m0s"}},
		{"lag at the bound", func(s *State) { s.Lag = time.Minute }, nil},
		{"held briefly", func(s *State) { s.Hold = held(HoldGrace / 2) }, nil},
		{"held long", func(s *State) { s.Hold = held(2 * HoldGrace) }, []string{"publishing holds behind message"}},
	} {
		s := up
		c.edit(&s)
		ok, why := Ready(s, now)
		if ok != (len(c.want) == 0) || len(why) != len(c.want) {
			t.Errorf("%s: ready %v, reasons %q; want %d reasons", c.name, ok, why, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(why[i], w) {
				t.Errorf("%s: reason %d is %q, want it to say %q", c.name, i, why[i], w)
			}
		}
	}
}

func TestReadyAndLeaderText(t *testing.T) {
	code, body := ReadyText(false, "", false, []string{"a", "b"})
	if code != http.StatusServiceUnavailable || body != "not ready: a; b\n" {
		t.Errorf("not ready: %d %q", code, body)
	}
	if code, body := ReadyText(true, "host-b", true, nil); code != http.StatusOK || !strings.Contains(body, "standby") || !strings.Contains(body, "host-b") {
		t.Errorf("standby: %d %q", code, body)
	}
	if code, body := LeaderText(Leadership{Leading: true}); code != http.StatusOK || body != "leader\n" {
		t.Errorf("leader: %d %q", code, body)
	}
	for _, l := range []Leadership{{}, {HAEnabled: true, Leader: "host-b"}, {HAEnabled: true, Name: "orders"}} {
		if code, _ := LeaderText(l); code != http.StatusServiceUnavailable {
			t.Errorf("%+v: /leader %d, want 503", l, code)
		}
	}
	if _, body := LeaderText(Leadership{HAEnabled: true, Name: "orders"}); !strings.Contains(body, "no relay named orders") {
		t.Errorf("no leader: %q", body)
	}
}
