package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/lanes"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/source"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

func haApp() *App {
	cfg := &config.Config{
		Name:   "orders-relay",
		Source: config.MySQL{Host: "replica.test", Port: 3306},
		Broker: config.Broker{URL: "amqp://relay:s3cret@rabbit.test:5672/"},
		Redis:  config.Redis{Addr: "redis.test:6379"},
		HA:     config.HA{Enabled: true},
	}
	src, err := source.Open(cfg.Source, zap.NewNop())
	if err != nil {
		panic(err)
	}
	return &App{Cfg: cfg, Log: zap.NewNop(), Source: src}
}

func get(t *testing.T, h http.HandlerFunc) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	return rec.Code, rec.Body.String()
}

func leaderz(a *App) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		code, body := a.leaderText()
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func readyz(a *App) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		code, body := a.readyText()
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

// A standby serves its metrics and waits: /readyz says ready and standby
// while Redis answers, /leader says 503; the leader answers /leader 200 and
// is judged on its stream again.
func TestStandbyReadyzAndLeader(t *testing.T) {
	a := haApp()
	a.ops.redisUp.Store(true)
	if code, body := get(t, readyz(a)); code != http.StatusOK || !strings.Contains(body, "standby") {
		t.Fatalf("standby /readyz = %d %q, want 200 naming standby", code, body)
	}
	if code, body := get(t, leaderz(a)); code != http.StatusServiceUnavailable || !strings.Contains(body, "standby") {
		t.Fatalf("standby /leader = %d %q, want 503", code, body)
	}
	a.ops.redisUp.Store(false)
	if code, body := get(t, readyz(a)); code != http.StatusServiceUnavailable || !strings.Contains(body, "redis redis.test:6379") {
		t.Fatalf("standby without redis: /readyz = %d %q, want 503 naming redis", code, body)
	}
	a.ops.redisUp.Store(true)
	a.leader.Set(true)
	if code, body := get(t, leaderz(a)); code != http.StatusOK || body != "leader\n" {
		t.Fatalf("leader /leader = %d %q, want 200", code, body)
	}
	if code, body := get(t, readyz(a)); code != http.StatusServiceUnavailable || !strings.Contains(body, "not running yet") {
		t.Fatalf("leader before its stream runs: /readyz = %d %q, want 503", code, body)
	}
}

// A leader whose term ends stops exporting its stream: a standby with a
// stale source connection "down" or a growing lag would page for nothing.
// The gauge binlog_relay_leader follows the term.
func TestEndTermForgetsTheStream(t *testing.T) {
	a := haApp()
	m := a.Metrics()
	a.leader.Set(true)
	r, err := binlog.New(binlog.Config{Host: "replica.test", Port: 3306, User: "relay", Flavor: binlog.FlavorMariaDB}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := publisher.New(publisher.Config{URL: a.Cfg.Broker.URL}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	a.watch(r, lanes.Set{p})
	for _, name := range []string{"binlog_relay_connection_up", "binlog_relay_binlog_lag_seconds", "binlog_relay_leader"} {
		if n, err := testutil.GatherAndCount(m.Registry(), name); err != nil || n == 0 {
			t.Fatalf("%s: %d series while leading (%v)", name, n, err)
		}
	}
	a.endTerm(context.Background())
	if n, _ := testutil.GatherAndCount(m.Registry(), "binlog_relay_binlog_lag_seconds"); n != 0 {
		t.Errorf("a standby exports the lag of its last term's stream")
	}
	exp := `# HELP binlog_relay_connection_up 1 when the connection is up: source (binlog stream), broker (RabbitMQ), redis (checkpoint store).
# TYPE binlog_relay_connection_up gauge
binlog_relay_connection_up{name="orders-relay",target="redis"} 0
# HELP binlog_relay_leader 1 on the relay that streams the binlog: the holder of the leader lease with ha.enabled, or a relay without ha.enabled once its binlog path runs; 0 on a standby. The relays of one name sum to 1.
# TYPE binlog_relay_leader gauge
binlog_relay_leader{name="orders-relay"} 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(exp), "binlog_relay_connection_up", "binlog_relay_leader"); err != nil {
		t.Error(err)
	}
	if ok, why := a.Ready(); ok {
		t.Errorf("standby without redis reported ready (%v)", why)
	}
}

// The backlog pollers run only on the leader, are cancelled when it steps
// down, and the gauges they fed are dropped then.
func TestPollersRunWhileLeading(t *testing.T) {
	a := haApp()
	started := make(chan bool, 4)
	stopped := make(chan struct{}, 4)
	resets := make(chan struct{}, 4)
	poll := func(ctx context.Context) {
		started <- a.leader.Is()
		<-ctx.Done()
		stopped <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.leader.While(ctx, poll, func() { resets <- struct{}{} })
	}()
	for term := range 2 {
		a.leader.Set(true)
		select {
		case leading := <-started:
			if !leading {
				t.Fatalf("term %d: the poller started on a standby", term)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("term %d: the poller did not start on the leader", term)
		}
		a.leader.Set(false)
		for _, ch := range []chan struct{}{stopped, resets} {
			select {
			case <-ch:
			case <-time.After(5 * time.Second):
				t.Fatalf("term %d: the poller was not stopped and reset when the lead was lost", term)
			}
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("whileLeading did not return when its context ended")
	}
	if len(started) != 0 {
		t.Fatal("the poller started while no term ran")
	}
}
