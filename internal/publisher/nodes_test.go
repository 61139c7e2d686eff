package publisher

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// clusterNodes are three broker URLs of one cluster, with a password that
// must never show.
var clusterNodes = []string{"amqp://relay:s3cret@mq-a:5672/", "amqp://relay:s3cret@mq-b:5672/", "amqp://relay:s3cret@mq-c:5672/"}

// With broker.urls the publisher dials the first node, and after a failure
// (a refused dial, or a connection lost) the node after the one that
// failed, wrapping around; every message is delivered in order, and the
// ones unconfirmed on the lost connection are republished (counted).
func TestNodesRotateAfterAFailure(t *testing.T) {
	for _, c := range []struct {
		name    string
		down    []int // nodes that refuse every dial
		resetOn []int // dial numbers (1-based) whose connection resets on its first publish
		want    []int // the nodes dialled, in order
	}{
		{"all up: the first node", nil, nil, []int{0}},
		{"first node down", []int{0}, nil, []int{0, 1}},
		{"first two down", []int{0, 1}, nil, []int{0, 1, 2}},
		{"connection lost: the next node", nil, []int{1}, []int{0, 1}},
		{"first down, lost on the second: the third", []int{0}, []int{2}, []int{0, 1, 2}},
		{"lost on every node once: back to the first", nil, []int{1, 2, 3}, []int{0, 1, 2, 0}},
		{"lost on the third, first two down: wraps past them", []int{0, 1}, []int{3}, []int{0, 1, 2, 0, 1, 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeBroker()
			f.down = map[string]bool{}
			for _, n := range c.down {
				f.down[clusterNodes[n]] = true
			}
			f.script = func(p fakePub) outcome {
				if slices.Contains(c.resetOn, p.conn) {
					return outcome{kind: closeConn} // code 0: a network reset
				}
				return outcome{code: -1}
			}
			e := fakeEnv{f}
			ex := e.bound(t)
			h := start(t, e, Config{URLs: clusterNodes, Window: 8})
			names := ids("m", 20)
			wantErrs(t, h.roundTrip(jobsTo(ex, names)...), nil)
			f.mu.Lock()
			got := make([]int, len(f.dialURLs))
			for i, u := range f.dialURLs {
				got[i] = slices.Index(clusterNodes, u)
			}
			f.mu.Unlock()
			if !slices.Equal(got, c.want) {
				t.Errorf("nodes dialled %v, want %v", got, c.want)
			}
			last := clusterNodes[c.want[len(c.want)-1]]
			if node := h.p.Node(); node != Redact(last) || strings.Contains(node, "s3cret") {
				t.Errorf("Node() = %q, want %q", node, Redact(last))
			}
			if !h.p.Connected() {
				t.Error("Connected() false after delivering")
			}
			if got := firstArrivals(e.received(t, ex, len(names))); !slices.Equal(got, names) {
				t.Errorf("routed %v, want %v in order", got, names)
			}
		})
	}
}

// The "broker connected" line names the node connected to (its URL
// without the password), and which of how many it is.
func TestBrokerConnectedNamesTheNode(t *testing.T) {
	f := newFakeBroker()
	f.down = map[string]bool{clusterNodes[0]: true}
	e := fakeEnv{f}
	ex := e.bound(t)
	core, logs := observer.New(zapcore.InfoLevel)
	h := startLogged(t, e, Config{URLs: clusterNodes}, zap.New(core))
	wantErrs(t, h.roundTrip(msg("m1", ex, "k")), nil)
	lines := logs.FilterMessage("broker connected").All()
	if len(lines) != 1 {
		t.Fatalf("%d \"broker connected\" lines, want 1", len(lines))
	}
	fields := lines[0].ContextMap()
	if fields["broker"] != "amqp://relay:xxxxx@mq-b:5672/" || fields["node"] != int64(2) || fields["nodes"] != int64(3) {
		t.Errorf("broker connected %v, want broker amqp://relay:xxxxx@mq-b:5672/, node 2 of 3", fields)
	}
	for _, l := range logs.All() {
		if strings.Contains(fmt.Sprint(l.Message, l.ContextMap()), "s3cret") {
			t.Errorf("a log line shows the password: %s %v", l.Message, l.ContextMap())
		}
	}
}

// The wait before a redial: none for the first one after a healthy
// connection nor for the rest of a round over the nodes; between rounds
// the backoff of one node (ReconnectMin doubling, at least 1s from the
// third round), so a cluster that is down costs at most one connection per
// node a second.
func TestRedialDelayPerRound(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		nodes  int
		streak int // dials since the last confirmation
		want   time.Duration
	}{
		{1, 0, 0}, {1, 1, 100 * ms}, {1, 2, 200 * ms}, {1, 3, time.Second}, {1, 8, 10 * time.Second},
		{3, 0, 0}, {3, 1, 0}, {3, 2, 0}, {3, 3, 100 * ms}, {3, 4, 0}, {3, 5, 0}, {3, 6, 200 * ms},
		{3, 9, time.Second}, {2, 1, 0}, {2, 2, 100 * ms}, {2, 3, 0}, {2, 4, 200 * ms},
	} {
		cfg := Config{URLs: clusterNodes[:c.nodes], ReconnectMin: 100 * ms, ReconnectMax: 10 * time.Second}
		if c.nodes == 1 {
			cfg = Config{URL: clusterNodes[0], ReconnectMin: 100 * ms, ReconnectMax: 10 * time.Second}
		}
		l := &link{cfg: &cfg, streak: c.streak}
		if got := l.redialDelay(); got != c.want {
			t.Errorf("%d nodes, %d dials: wait %s, want %s", c.nodes, c.streak, got, c.want)
		}
	}
}

// broker.url and broker.urls are exclusive; each URL is checked and named
// by its index, without its password.
func TestConfigNodes(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{URLs: clusterNodes}, ""},
		{Config{URL: clusterNodes[0], URLs: clusterNodes}, "broker.urls: set broker.url (one node) or broker.urls (the nodes of one cluster), not both"},
		{Config{URLs: []string{clusterNodes[0], "http://relay:s3cret@mq-b/"}}, "broker.urls[1]: must start with amqp:// or amqps://"},
		{Config{}, "broker.url: required (or broker.urls, the nodes of one cluster)"},
	} {
		c.cfg.Defaults()
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.cfg.URLs, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("error %v, want %q", err, c.want)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("error shows the password: %v", err)
		}
	}
	if got := (&Config{URL: "amqp://x/"}).Nodes(); !slices.Equal(got, []string{"amqp://x/"}) {
		t.Errorf("Nodes() of one URL = %v", got)
	}
}
