package integration

// HA as an orchestrator sees it: every relay of a name ready, exactly one
// answering /leader, binlog_relay_leader summing to 1 across them, through
// a kill, a restart and a leader deposed while paused.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// haRelay is a relay process and its HTTP base URL.
type haRelay struct {
	p    *relaytest.Process
	base string
}

func startHARelay(t *testing.T, cfg string) *haRelay {
	t.Helper()
	p := relaytest.StartProcess(t, cfg)
	m := waitLogged(t, p, "metrics and health endpoints listening", 1, 30*time.Second)
	return &haRelay{p: p, base: "http://" + m["addr"].(string)}
}

func (r *haRelay) status(path string) (int, string) {
	code, body, err := get(r.base + path)
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

func (r *haRelay) metrics() (map[string]*dto.MetricFamily, error) {
	fams, _, err := readMetrics(r.base)
	return fams, err
}

// haView is what one look at the relays found, for the conditions and the
// failure messages.
type haView struct {
	ready, leader []int    // status codes of /readyz and /leader, by relay
	bodies        []string // /readyz bodies
	leaderSum     float64  // binlog_relay_leader{name} over the relays
	gauges        []float64
	backlog       []bool // exports binlog_relay_outbox_rows
	stream        []bool // exports binlog_relay_binlog_lag_seconds
	info          []bool // exports binlog_relay_build_info{name}
	err           error
	at            time.Time
}

func lookHA(name string, relays ...*haRelay) haView {
	v := haView{at: time.Now()}
	for _, r := range relays {
		code, body := r.status("/readyz")
		v.ready, v.bodies = append(v.ready, code), append(v.bodies, strings.TrimSpace(body))
		code, _ = r.status("/leader")
		v.leader = append(v.leader, code)
		fams, err := r.metrics()
		if err != nil {
			v.err = err
			return v
		}
		g, ok := value(fams, "binlog_relay_leader", "name", name)
		if !ok {
			v.err = fmt.Errorf("%s exports no binlog_relay_leader{name=%q}", r.base, name)
		}
		v.leaderSum += g
		v.gauges = append(v.gauges, g)
		_, backlog := value(fams, "binlog_relay_outbox_rows", "name", name)
		_, stream := value(fams, "binlog_relay_binlog_lag_seconds", "name", name)
		// Any version: a build in a git checkout reports the module's
		// pseudo-version, one with -ldflags what it was stamped with.
		_, info := value(fams, "binlog_relay_build_info", "name", name)
		v.backlog, v.stream, v.info = append(v.backlog, backlog), append(v.stream, stream), append(v.info, info)
	}
	return v
}

// oneLeader reports whether relays[lead] leads and every other is a ready
// standby, as each endpoint and the metrics say.
func (v haView) oneLeader(lead int) bool {
	if v.err != nil || v.leaderSum != 1 {
		return false
	}
	for i := range v.ready {
		isLead := i == lead
		if v.ready[i] != http.StatusOK || strings.Contains(v.bodies[i], "standby") == isLead || !v.info[i] {
			return false
		}
		want := http.StatusServiceUnavailable
		if isLead {
			want = http.StatusOK
		}
		if v.leader[i] != want || (v.gauges[i] == 1) != isLead || v.backlog[i] != isLead || v.stream[i] != isLead {
			return false
		}
	}
	return true
}

func waitOneLeader(t *testing.T, within time.Duration, what, name string, lead int, relays ...*haRelay) time.Duration {
	t.Helper()
	start := time.Now()
	var last haView
	testenv.Eventually(t, within, func() bool {
		if !last.at.IsZero() {
			time.Sleep(100 * time.Millisecond) // a few scrapes a second are plenty
		}
		last = lookHA(name, relays...)
		return last.oneLeader(lead)
	}, "%s: want relay %d leading and the others ready standbys; last look: %+v", what, lead, &last)
	return time.Since(start)
}

// Test: two relays of one name with ha.enabled, as a 2-replica Deployment
// runs them. Both are ready (the standby's /readyz says so), exactly one
// answers /leader 200 and only it polls the backlog and exports a stream;
// binlog_relay_leader sums to 1. Killing the leader hands over within
// seconds; the killed one restarted comes back as a standby; a leader paused
// past its lease is deposed and, resumed, reports itself a standby with no
// stream left in its metrics. Rows flow throughout.
func TestHAReadinessAndLeaderGauge(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("haready")
	cfg := relaytest.WriteConfig(t, relaytest.RelayConfig(name, relaytest.SeedTable(db.Name), fmt.Sprintf(
		"ha: {enabled: true, lease_ttl: %s}\nhttp: {addr: \"127.0.0.1:0\", backlog_interval: 300ms}\n", haTTL)))
	a := startHARelay(t, cfg)
	waitLogged(t, a.p, "leader lease acquired", 1, 30*time.Second)
	b := startHARelay(t, cfg)
	waitOneLeader(t, 30*time.Second, "two relays started", name, 0, a, b)
	if _, body := b.status("/leader"); !strings.Contains(body, "the leader is "+hostname(t)) {
		t.Errorf("the standby's /leader does not name the leader: %q", body)
	}
	// The dashboard's instance picker lists every relay: its metric is on
	// the standby's /metrics.
	if m := instancePickerMetric(t); !strings.Contains(scrapeText(t, b), "\n"+m+"{") {
		t.Errorf("the dashboard's instance picker reads %s, which the standby does not export", m)
	}
	want := insertOrders(t, db, br.Exchange, "before", 5, 10)
	waitAllDistinct(t, got, want, 30*time.Second)

	signal(t, a.p, syscall.SIGKILL)
	if _, err := a.p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	took := waitOneLeader(t, 15*time.Second, "leader killed", name, 0, b)
	t.Logf("the standby leads, ready, %s after the leader was killed", took.Round(100*time.Millisecond))
	want = append(want, insertOrders(t, db, br.Exchange, "afterkill", 5, 10)...)
	waitAllDistinct(t, got, want, 30*time.Second)

	a = startHARelay(t, cfg)
	waitOneLeader(t, 30*time.Second, "killed relay restarted", name, 1, a, b)

	// Paused past its lease, b is deposed: a takes over. Resumed, b must
	// report what it is now, a standby, with its dead stream gone from its
	// metrics (no lag growing, no source "down").
	signal(t, b.p, syscall.SIGSTOP)
	testenv.Eventually(t, 15*time.Second, func() bool { code, _ := a.status("/leader"); return code == http.StatusOK },
		"the standby did not take over from a paused leader")
	signal(t, b.p, syscall.SIGCONT)
	took = waitOneLeader(t, 30*time.Second, "paused leader resumed", name, 0, a, b)
	t.Logf("the deposed leader reports itself a standby %s after it resumed", took.Round(100*time.Millisecond))
	want = append(want, insertOrders(t, db, br.Exchange, "afterpause", 5, 10)...)
	waitAllDistinct(t, got, want, 30*time.Second)
}

func hostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func scrapeText(t *testing.T, r *haRelay) string {
	t.Helper()
	code, body, err := get(r.base + "/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	return "\n" + body
}

// instancePickerMetric is the metric the dashboard's instance variable
// lists its values from.
func instancePickerMetric(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(testenv.RepoPath("deploy/grafana/binlog-relay.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	for _, v := range dash.Templating.List {
		if v.Name == "instance" {
			if m := regexp.MustCompile(`label_values\((binlog_relay_[a-z_]+)`).FindStringSubmatch(v.Definition); m != nil {
				return m[1]
			}
		}
	}
	t.Fatal("the dashboard has no instance variable reading a binlog_relay_ metric")
	return ""
}
