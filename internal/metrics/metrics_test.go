package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/publisher"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func seedTable(t *testing.T) *outbox.Table {
	t.Helper()
	return outboxtest.Preset(t, "producer-message", "shop", nil)
}

func TestMetricsObserverCountsRows(t *testing.T) {
	m := New()
	tb := seedTable(t)
	for range 5 {
		m.Published(tb, "orders", 3*time.Millisecond, 2*time.Second)
	}
	m.Published(tb, "payments", time.Millisecond, 0)
	m.Failed(tb, "orders", fmt.Errorf("publish: %w: 312 NO_ROUTE", publisher.ErrReturned))
	m.Failed(tb, "orders", publisher.ErrNacked)
	m.Failed(tb, "", errors.New("route: no exchange"))
	m.Marked(tb, 6)
	m.SweeperClaims(tb, 4)
	m.SweeperClaims(tb, 0)
	m.Checkpointed(checkpoint.Checkpoint{Flavor: "mariadb", GTIDSet: "0-1-9", File: "binlog.000007", Pos: 1234, SavedAt: time.Now()})

	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.published.WithLabelValues("shop.producer_message", "orders")), 5, "published orders"},
		{testutil.ToFloat64(m.published.WithLabelValues("shop.producer_message", "payments")), 1, "published payments"},
		{testutil.ToFloat64(m.failed.WithLabelValues("shop.producer_message", "orders", "returned")), 1, "failed returned"},
		{testutil.ToFloat64(m.failed.WithLabelValues("shop.producer_message", "orders", "nacked")), 1, "failed nacked"},
		{testutil.ToFloat64(m.failed.WithLabelValues("shop.producer_message", "", "route")), 1, "failed route"},
		{testutil.ToFloat64(m.returned.WithLabelValues("shop.producer_message", "orders")), 1, "returned"},
		{testutil.ToFloat64(m.marked.WithLabelValues("shop.producer_message")), 6, "marked"},
		{testutil.ToFloat64(m.claims.WithLabelValues("shop.producer_message")), 4, "sweeper claims"},
		{testutil.ToFloat64(m.saves), 1, "checkpoints"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.confirm); n != 1 {
		t.Errorf("confirm histogram series = %d", n)
	}
	want := `
# HELP binlog_relay_commit_to_confirm_seconds Time from the source's commit (binlog event timestamp, whole seconds) to the broker's confirm, per published row.
# TYPE binlog_relay_commit_to_confirm_seconds histogram
binlog_relay_commit_to_confirm_seconds_bucket{le="0.25"} 0
binlog_relay_commit_to_confirm_seconds_bucket{le="0.5"} 0
binlog_relay_commit_to_confirm_seconds_bucket{le="1"} 0
binlog_relay_commit_to_confirm_seconds_bucket{le="2"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="5"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="10"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="30"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="60"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="120"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="300"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="600"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="1800"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="3600"} 5
binlog_relay_commit_to_confirm_seconds_bucket{le="+Inf"} 5
binlog_relay_commit_to_confirm_seconds_sum 10
binlog_relay_commit_to_confirm_seconds_count 5
`
	if err := testutil.CollectAndCompare(m.commit, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	// The registry passes the linter (names, help, units).
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, Namespace) {
			t.Errorf("lint %s: %s", p.Metric, p.Text)
		}
	}
}

type fakeStream struct {
	lag       time.Duration
	commit    binlog.Commit
	hasCommit bool
	up        bool
}

func (f *fakeStream) Lag(time.Time) time.Duration       { return f.lag }
func (f *fakeStream) LastCommit() (binlog.Commit, bool) { return f.commit, f.hasCommit }
func (f *fakeStream) Connected() bool                   { return f.up }

// gather renders the named metric families in the text format.
func gather(t *testing.T, m *Metrics, names ...string) string {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if slices.Contains(names, mf.GetName()) {
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

func TestMetricsLiveState(t *testing.T) {
	m := New()
	s := &fakeStream{commit: binlog.Commit{File: "binlog.000012", Pos: 4567}, hasCommit: true, lag: 1500 * time.Millisecond, up: true}
	var broker atomic.Bool
	m.WatchStream(s)
	m.WatchConn(TargetBroker, ConnFunc(broker.Load))
	m.WatchReady(func() bool { return false })
	saved := time.Now().Add(-10 * time.Second)
	m.live.now = func() time.Time { return saved.Add(12 * time.Second) }
	m.Checkpointed(checkpoint.Checkpoint{File: "binlog.000012", Pos: 4000, SavedAt: saved})

	want := `
# HELP binlog_relay_binlog_file_sequence Numeric suffix of the binlog file of the last whole transaction read (binlog.000042 gives 42).
# TYPE binlog_relay_binlog_file_sequence gauge
binlog_relay_binlog_file_sequence 12
# HELP binlog_relay_binlog_offset Byte offset (end of the last whole transaction read) in the file binlog_file_sequence names.
# TYPE binlog_relay_binlog_offset gauge
binlog_relay_binlog_offset 4567
# HELP binlog_relay_checkpoint_age_seconds Time since the last checkpoint was saved. Saves happen only when transactions were read, so this grows on an idle source; watch lag for stalls.
# TYPE binlog_relay_checkpoint_age_seconds gauge
binlog_relay_checkpoint_age_seconds 12
# HELP binlog_relay_checkpoint_file_sequence Numeric suffix of the binlog file of the saved checkpoint.
# TYPE binlog_relay_checkpoint_file_sequence gauge
binlog_relay_checkpoint_file_sequence 12
# HELP binlog_relay_checkpoint_offset Byte offset of the saved checkpoint in the file checkpoint_file_sequence names.
# TYPE binlog_relay_checkpoint_offset gauge
binlog_relay_checkpoint_offset 4000
# HELP binlog_relay_connection_up 1 when the connection is up: source (binlog stream), broker (RabbitMQ), redis (checkpoint store).
# TYPE binlog_relay_connection_up gauge
binlog_relay_connection_up{target="broker"} 0
binlog_relay_connection_up{target="source"} 1
# HELP binlog_relay_ready 1 when /readyz reports ready.
# TYPE binlog_relay_ready gauge
binlog_relay_ready 0
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want),
		"binlog_relay_binlog_file_sequence", "binlog_relay_binlog_offset", "binlog_relay_checkpoint_age_seconds",
		"binlog_relay_checkpoint_file_sequence", "binlog_relay_checkpoint_offset",
		"binlog_relay_connection_up", "binlog_relay_ready"); err != nil {
		t.Error(err)
	}
	lag := gather(t, m, "binlog_relay_binlog_lag_seconds")
	if !strings.Contains(lag, "binlog_relay_binlog_lag_seconds 1.5") {
		t.Errorf("lag gauge missing or wrong:\n%s", lag)
	}
	broker.Store(true)
	if got := gather(t, m, "binlog_relay_connection_up"); !strings.Contains(got, `binlog_relay_connection_up{target="broker"} 1`) {
		t.Errorf("broker state not read at scrape time:\n%s", got)
	}
	if got := gather(t, m, "binlog_relay_unmarked_rows"); got != "" {
		t.Errorf("unmarked rows exported before anything is watched:\n%s", got)
	}
	var unmarked atomic.Int64
	m.WatchUnmarked(unmarked.Load)
	for _, n := range []int64{0, 1234} {
		unmarked.Store(n)
		if got := gather(t, m, "binlog_relay_unmarked_rows"); !strings.Contains(got, fmt.Sprintf("binlog_relay_unmarked_rows %d\n", n)) {
			t.Errorf("unmarked rows not read at scrape time (want %d):\n%s", n, got)
		}
	}
}

// Every binlog_relay_* series carries the relay's name, so the relays of
// one name (a leader and its standbys) aggregate by it; go_* and process_*
// do not. build_info names the build.
func TestMetricsNameLabelAndBuildInfo(t *testing.T) {
	m := NewWith(Config{Name: "orders-relay"}, zap.NewNop())
	m.SetBuildInfo("v1.2.3", "0123abc")
	m.WatchLeader(func() bool { return true })
	m.Published(seedTable(t), "orders", time.Millisecond, time.Second)
	m.HeaderOmitted(seedTable(t), "traceparent")
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range families {
		relay := strings.HasPrefix(f.GetName(), Namespace+"_")
		for _, metric := range f.GetMetric() {
			named := false
			for _, l := range metric.GetLabel() {
				named = named || (l.GetName() == "name" && l.GetValue() == "orders-relay")
			}
			if relay != named {
				t.Errorf("%s: name label %v, want %v", f.GetName(), named, relay)
			}
		}
		if relay {
			seen++
		}
	}
	if seen < 5 {
		t.Fatalf("only %d binlog_relay_* families gathered", seen)
	}
	info := gather(t, m, "binlog_relay_build_info")
	if !strings.Contains(info, `commit="0123abc"`) || !strings.Contains(info, `version="v1.2.3"`) ||
		!strings.Contains(info, `go="go1.`) || !strings.HasSuffix(strings.TrimSpace(info), "} 1") {
		t.Errorf("build info:\n%s", info)
	}
	if got := gather(t, m, "binlog_relay_leader"); !strings.Contains(got, `binlog_relay_leader{name="orders-relay"} 1`) {
		t.Errorf("leader gauge:\n%s", got)
	}
}

// A relay that stops polling the backlog (an HA standby) drops the gauges
// instead of exporting its last reading forever.
func TestMetricsResetBacklog(t *testing.T) {
	m := New()
	m.outboxRows.WithLabelValues("shop.producer_message", StatusPending).Set(7)
	m.queueMessages.WithLabelValues("/", "orders").Set(3)
	m.ResetBacklog()
	for _, name := range []string{"binlog_relay_outbox_rows", "binlog_relay_queue_messages"} {
		if n, _ := testutil.GatherAndCount(m.Registry(), name); n != 0 {
			t.Errorf("%s: %d series after ResetBacklog", name, n)
		}
	}
}

func TestMetricsFailureReason(t *testing.T) {
	for _, c := range []struct {
		exchange string
		err      error
		want     string
	}{
		{"orders", fmt.Errorf("publishing: %w", publisher.ErrReturned), "returned"},
		{"orders", fmt.Errorf("publishing: %w", publisher.ErrNacked), "nacked"},
		{"orders", fmt.Errorf("publishing: %w", publisher.ErrTooLarge), "too_large"},
		{"orders", fmt.Errorf("publishing: %w", publisher.ErrNoExchange), "no_exchange"},
		{"orders", fmt.Errorf("publishing: %w", publisher.ErrRefused), "refused"},
		{"orders", fmt.Errorf("publishing: %w", publisher.ErrFieldTooLong), "field_too_long"},
		// A broker error wins over a missing exchange, the first one tried wins.
		{"", publisher.ErrNoExchange, "no_exchange"},
		{"orders", errors.Join(publisher.ErrNacked, publisher.ErrReturned), "returned"},
		{"", errors.New("no route matched"), "route"},
		{"orders", errors.New("connection reset"), "other"},
		{"orders", nil, "other"},
	} {
		if got := FailureReason(c.exchange, c.err); got != c.want {
			t.Errorf("FailureReason(%q, %v) = %q, want %q", c.exchange, c.err, got, c.want)
		}
	}
}

func TestMetricsSplitGTID(t *testing.T) {
	for _, c := range []struct {
		in     string
		source string
		seq    uint64
		ok     bool
	}{
		{"0-1-42", "0-1", 42, true},
		{"10-3-18446744073709551615", "10-3", 18446744073709551615, true},
		{"3E11FA47-71CA-11E1-9E33-C80AA9429562:23", "3E11FA47-71CA-11E1-9E33-C80AA9429562", 23, true},
		{"", "", 0, false},
		{"0-1-", "", 0, false},
		{"garbage", "", 0, false},
	} {
		src, seq, ok := SplitGTID(c.in)
		if src != c.source || seq != c.seq || ok != c.ok {
			t.Errorf("SplitGTID(%q) = %q %d %v, want %q %d %v", c.in, src, seq, ok, c.source, c.seq, c.ok)
		}
	}
}

// The statements one table's poll sends (pollBatch of that table alone):
// counts by status with the oldest row's age, and the retry ratio over the
// statuses the relay knows, on the seed table.
func TestMetricsBacklogQueries(t *testing.T) {
	tb := seedTable(t)
	q, ok := BacklogQueries(tb)
	if !ok {
		t.Fatal("seed table has a status column")
	}
	ratio, ratioArgs := outboxsql.RetryRatioTaggedSQL(q.t, q.ratioStatuses, 0)
	for _, c := range []struct{ got, want string }{
		{outboxsql.BacklogSQL(q.t, q.watched, 0), "SELECT 0, CONVERT(`status` USING utf8mb4), COUNT(*), GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(`create_time`), NOW(6)) / 1e6, 0) FROM `shop`.`producer_message` WHERE `status` IN ('PENDING', 'SENDING', 'FAILED') GROUP BY `status`"},
		{ratio, "SELECT 0, COUNT(*), COALESCE(SUM(`retry_count` >= 3), 0) FROM `shop`.`producer_message` WHERE `status` IN ('PENDING', 'SENDING', 'FAILED', 'SENT') AND `update_time` >= NOW(3) - INTERVAL ? MICROSECOND"},
	} {
		if c.got != c.want {
			t.Errorf("got  %s\nwant %s", c.got, c.want)
		}
	}
	if len(ratioArgs) != 1 || ratioArgs[0] != time.Hour.Microseconds() {
		t.Errorf("retry ratio window argument %v, want an hour in microseconds", ratioArgs)
	}
	if q.statuses["PENDING"] != StatusPending || q.statuses["FAILED"] != StatusFailed {
		t.Errorf("status labels: %v", q.statuses)
	}

	local, _ := outbox.Preset("local-message")
	local.Schema = "shop"
	q, ok = BacklogQueries(&local)
	if got := outboxsql.BacklogSQL(q.t, q.watched, 0); !ok || !strings.Contains(got, "IN (0, 2)") || q.statuses["0"] != StatusPending || q.statuses["2"] != StatusFailed {
		t.Errorf("numeric statuses: %v %q %v", ok, got, q.statuses)
	}
	deb, _ := outbox.Preset("debezium")
	deb.Schema = "shop"
	if _, ok := BacklogQueries(&deb); ok {
		t.Error("a table without a status column has no backlog to count")
	}
	ev, _ := outbox.Preset("eventuate")
	ev.Schema = "shop"
	q, ok = BacklogQueries(&ev)
	if !ok || len(q.ratioStatuses) != 0 || q.pending == "" {
		t.Errorf("eventuate: ok=%v pending=%q ratio statuses=%q; want its oldest PENDING aged and no retry ratio (no retry_count)", ok, q.pending, q.ratioStatuses)
	}
}

func TestMetricsQueueDepthFromManagementAPI(t *testing.T) {
	const password = "mgmt-s3cret-pw"
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		user, pass, ok := r.BasicAuth()
		if !ok || user != "monitor" || pass != password {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.EscapedPath() {
		case "/api/queues/%2F/orders":
			_, _ = w.Write([]byte(`{"name":"orders","messages":42,"messages_ready":40,"messages_unacknowledged":2,"consumers":3}`))
		default:
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"Object Not Found","reason":"Not Found"}`))
		}
	}))
	defer srv.Close()
	core, logs := observer.New(zapcore.DebugLevel)
	m := New()
	url := strings.Replace(srv.URL, "http://", "http://monitor:"+password+"@", 1)
	q := &Queues{URL: url, VHost: "/", Names: []string{"orders", "missing"}, Interval: 20 * time.Millisecond, Metrics: m, Log: zap.New(core)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.queueMessages.WithLabelValues("/", "orders")) != 42 || testutil.ToFloat64(m.queueErrors) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("queue depth not read: requests=%d", requests.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.queueReady.WithLabelValues("/", "orders")); got != 40 {
		t.Errorf("ready = %v", got)
	}
	if got := testutil.ToFloat64(m.queueUnacked.WithLabelValues("/", "orders")); got != 2 {
		t.Errorf("unacked = %v", got)
	}
	if got := testutil.ToFloat64(m.queueConsumer.WithLabelValues("/", "orders")); got != 3 {
		t.Errorf("consumers = %v", got)
	}
	if got := testutil.ToFloat64(m.queueErrors); got < 3 {
		t.Errorf("errors for the missing queue = %v, want one per poll", got)
	}
	// The failing queue is logged once, not per poll, and never with the
	// password.
	warns := logs.FilterMessageSnippet("management API query failed").All()
	if len(warns) != 1 {
		t.Errorf("%d warnings for a persistently failing queue, want 1", len(warns))
	}
	for _, e := range logs.All() {
		line := e.Message
		for _, f := range e.Context {
			line += fmt.Sprintf(" %s=%v%s", f.Key, f.String, f.Interface)
		}
		if strings.Contains(line, password) {
			t.Errorf("log line carries the password: %s", line)
		}
	}
}

// Every metric is in docs/operating.md's table.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	names := New().Names()
	if len(names) < 20 {
		t.Fatalf("only %d metrics: %v", len(names), names)
	}
	for _, n := range names {
		if !strings.Contains(string(doc), "| `"+n+"` |") {
			t.Errorf("%s is not in the metrics table of docs/operating.md", n)
		}
	}
}

// The reconciliation gauges exist only once a run succeeded, are replaced
// by each run (a pair no longer reported loses its series), and are
// dropped when the relay stops leading.
func TestReconcileGauges(t *testing.T) {
	m := New()
	count := func() int {
		fams, err := m.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range fams {
			if strings.HasPrefix(f.GetName(), "binlog_relay_reconcile_") {
				n += len(f.GetMetric())
			}
		}
		return n
	}
	if n := count(); n != 0 {
		t.Fatalf("%d reconcile series before any run", n)
	}
	m.Reconciled([]ReconcilePair{{"shop.a", "inventory", 3, 0}, {"shop.a", "audit", 0, 1}}, 4, time.Unix(1700000000, 0))
	if n := count(); n != 2+2+1+1 {
		t.Fatalf("%d series after a run with two pairs, want 6", n)
	}
	m.Reconciled([]ReconcilePair{{"shop.a", "inventory", 0, 0}}, 0, time.Unix(1700003600, 0))
	if n := count(); n != 1+1+1+1 {
		t.Fatalf("%d series after a run with one pair, want 4", n)
	}
	m.ReconcileCleared()
	if n := count(); n != 0 {
		t.Fatalf("%d series after leadership was lost", n)
	}
}
