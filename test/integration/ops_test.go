package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/metrics"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// opsYAML is a relay config for the stack with sections replaced by the
// caller (flow-style YAML bodies by top-level key). HTTP listens on a free
// port and the sweeper is off, so the outbox counts are the binlog path's.
func opsYAML(name, tables string, sections map[string]string) string {
	s := map[string]string{
		"http":    `{addr: "127.0.0.1:0", backlog_interval: 300ms, retry_ratio_interval: 300ms}`,
		"sweeper": "{enabled: false}",
	}
	maps.Copy(s, sections)
	return relaytest.Config{Name: name, Tables: tables, Sections: s}.YAML()
}

// httpAddr waits for the relay's HTTP server and returns its base URL.
func httpAddr(t *testing.T, a *app.App) string {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, func() bool { return a.HTTPAddr() != "" }, "the HTTP server did not start")
	return "http://" + a.HTTPAddr()
}

func get(url string) (int, string, error) {
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// scrape reads /metrics and parses it.
func scrape(t *testing.T, base string) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	fams, body, err := readMetrics(base)
	if err != nil {
		t.Fatal(err)
	}
	return fams, body
}

// readMetrics is scrape for a server that may be gone: the error says why.
func readMetrics(base string) (map[string]*dto.MetricFamily, string, error) {
	code, body, err := get(base + "/metrics")
	if err != nil || code != http.StatusOK {
		return nil, body, fmt.Errorf("GET /metrics: %d %v", code, err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, body, fmt.Errorf("parsing /metrics: %v\n%s", err, body)
	}
	return fams, body, nil
}

// value sums a family's samples whose labels include the given pairs
// (counter, gauge, or a histogram's count); present is false when none match.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, present bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				match = false
			}
		}
		if !match {
			continue
		}
		present = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v, present
}

// excerpt keeps the binlog_relay_ sample lines (no histogram buckets), for
// the test log.
func excerpt(body string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "binlog_relay_") && !strings.Contains(line, "_bucket{") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

func replicaCount(t *testing.T, db *sql.DB, q string, args ...any) float64 {
	t.Helper()
	var n sql.NullFloat64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("replica query %.80q: %v", q, err)
	}
	return n.Float64
}

// Test 1: /metrics during a run of 5,000 rows: the published counter is
// exactly 5,000, lag and position gauges are there, and the backlog gauges
// match COUNTs on the replica.
func TestMetricsDuringRun(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	table := db.Name + ".producer_message"

	// A backlog the binlog path leaves alone: rows inserted as SENT (not
	// publishable) and moved with UPDATEs (the relay reads only INSERTs).
	var values []string
	for i := range 20 {
		values = append(values, fmt.Sprintf("('fixed-%02d', '%s', 'k', '{}', 'SENT')", i, br.Exchange))
	}
	db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content, status) VALUES "+strings.Join(values, ","))
	db.Exec(t, "UPDATE producer_message SET status = 'PENDING', create_time = NOW(3) - INTERVAL 1 HOUR WHERE message_id < 'fixed-12'")
	db.Exec(t, "UPDATE producer_message SET status = 'SENDING' WHERE message_id BETWEEN 'fixed-12' AND 'fixed-14'")
	db.Exec(t, "UPDATE producer_message SET status = 'FAILED', retry_count = 5, error_msg = 'test' WHERE message_id >= 'fixed-15'")

	r := relaytest.StartRelay(t, opsYAML(testenv.UniqueName("metrics"), relaytest.SeedTable(db.Name), nil))
	base := httpAddr(t, r.App)

	// Scrape all along the run: every scrape parses and the counter never
	// goes back.
	stop := make(chan struct{})
	var scrapes []float64
	var scrapeErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			code, body, err := get(base + "/metrics")
			if err != nil || code != http.StatusOK {
				scrapeErr = fmt.Errorf("GET /metrics during the run: %d %v", code, err)
				return
			}
			parser := expfmt.NewTextParser(model.LegacyValidation)
			fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
			if err != nil {
				scrapeErr = err
				return
			}
			v, _ := value(fams, "binlog_relay_messages_published_total", "table", table)
			scrapes = append(scrapes, v)
		}
	})
	want := insertOrders(t, db, br.Exchange, "met", 50, 100)
	testenv.Eventually(t, 60*time.Second, func() bool { return got.Len() >= len(want) }, "received %d of %d", got.Len(), len(want))
	close(stop)
	wg.Wait()
	if scrapeErr != nil {
		t.Fatal(scrapeErr)
	}
	if len(scrapes) == 0 || !slices.IsSorted(scrapes) {
		t.Fatalf("published counter during the run: %v", scrapes)
	}
	t.Logf("%d scrapes during the run, published went %v .. %v", len(scrapes), scrapes[0], scrapes[len(scrapes)-1])

	testenv.Eventually(t, 10*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) }, "SENT on the primary: %v", statusCounts(t, db.Primary))
	db.WaitReplicated(t, 30*time.Second)

	// The backlog gauges converge on what the replica holds now.
	type check struct {
		metric string
		labels []string
		query  string
	}
	checks := []check{
		{"binlog_relay_outbox_rows", []string{"table", table, "status", "PENDING"}, "SELECT COUNT(*) FROM " + table + " WHERE status = 'PENDING'"},
		{"binlog_relay_outbox_rows", []string{"table", table, "status", "SENDING"}, "SELECT COUNT(*) FROM " + table + " WHERE status = 'SENDING'"},
		{"binlog_relay_outbox_rows", []string{"table", table, "status", "FAILED"}, "SELECT COUNT(*) FROM " + table + " WHERE status = 'FAILED'"},
		{"binlog_relay_outbox_retry_ratio", []string{"table", table},
			"SELECT CAST(SUM(retry_count >= 3) AS DOUBLE) / COUNT(*) FROM " + table + " WHERE update_time >= NOW(6) - INTERVAL 1 HOUR"},
	}
	var fams map[string]*dto.MetricFamily
	var body string
	var mismatch []string
	for deadline := time.Now().Add(15 * time.Second); ; {
		fams, body = scrape(t, base)
		mismatch = mismatch[:0]
		for _, c := range checks {
			v, ok := value(fams, c.metric, c.labels...)
			if want := replicaCount(t, db.Replica, c.query); !ok || math.Abs(v-want) > 1e-9 {
				mismatch = append(mismatch, fmt.Sprintf("%s%v = %v (present %v), replica says %v", c.metric, c.labels, v, ok, want))
			}
		}
		if len(mismatch) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backlog gauges never matched the replica:\n%s\n%s", strings.Join(mismatch, "\n"), excerpt(body))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range checks {
		v, _ := value(fams, c.metric, c.labels...)
		t.Logf("%s%v = %v (replica: %v)", c.metric, c.labels, v, replicaCount(t, db.Replica, c.query))
	}
	if v, _ := value(fams, "binlog_relay_outbox_rows", "table", table, "status", "PENDING"); v != 12 {
		t.Errorf("PENDING gauge %v, want the 12 rows set aside", v)
	}

	// Exact counts, and the gauges an operator reads.
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"binlog_relay_messages_published_total", []string{"table", table, "exchange", br.Exchange}, 5000},
		{"binlog_relay_rows_marked_sent_total", []string{"table", table}, 5000},
		{"binlog_relay_publish_confirm_seconds", nil, 5000},
		{"binlog_relay_commit_to_confirm_seconds", nil, 5000},
		{"binlog_relay_connection_up", []string{"target", "broker"}, 1},
		{"binlog_relay_connection_up", []string{"target", "source"}, 1},
		{"binlog_relay_connection_up", []string{"target", "redis"}, 1},
		{"binlog_relay_ready", nil, 1},
		{"binlog_relay_unmarked_rows", nil, 0}, // every confirmed row marked
	} {
		if v, ok := value(fams, c.name, c.labels...); !ok || v != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	if v, ok := value(fams, "binlog_relay_messages_failed_total"); ok && v != 0 {
		t.Errorf("failed rows: %v", v)
	}
	if v, ok := value(fams, "binlog_relay_outbox_oldest_pending_age_seconds", "table", table); !ok || v < 3500 || v > 3900 {
		t.Errorf("oldest PENDING age %v (present %v), want about an hour", v, ok)
	}
	for _, name := range []string{"binlog_relay_binlog_lag_seconds", "binlog_relay_binlog_file_sequence", "binlog_relay_binlog_offset",
		"binlog_relay_binlog_gtid_sequence", "binlog_relay_checkpoint_age_seconds", "binlog_relay_checkpoint_file_sequence",
		"binlog_relay_checkpoint_offset"} {
		if _, ok := value(fams, name); !ok {
			t.Errorf("%s missing", name)
		}
	}
	if lag, _ := value(fams, "binlog_relay_binlog_lag_seconds"); lag > 10 {
		t.Errorf("lag %vs after the run", lag)
	}
	if n, _ := value(fams, "binlog_relay_checkpoints_total"); n < 1 {
		t.Error("no checkpoint counted")
	}

	// Idle: with no outbox traffic for a while, heartbeats keep the lag
	// near zero; a silent stream would show the silence (4 s here) as lag.
	// Other tests share the replica, so their bursts may add to it for a
	// moment: a low reading within the deadline is what counts.
	time.Sleep(4 * time.Second)
	var lag float64
	testenv.Eventually(t, 10*time.Second, func() bool {
		fams, body = scrape(t, base)
		lag, _ = value(fams, "binlog_relay_binlog_lag_seconds")
		return lag < 2
	}, "lag stays high when idle: heartbeats should keep it near zero")
	t.Logf("idle lag %.3fs", lag)
	t.Logf("/metrics excerpt after the run:\n%s", excerpt(body))

	if code, _, err := get(base + "/healthz"); code != http.StatusOK || err != nil {
		t.Errorf("/healthz: %d %v", code, err)
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, _, err := get(base + "/healthz"); err == nil {
		t.Error("the HTTP server still answers after the relay stopped")
	}
}

// Test 2: /readyz says not ready within 10 s of RabbitMQ going away (a proxy
// in front of it is cut) and ready again once it is back.
func TestReadyzFollowsBrokerConnection(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	proxy := testenv.Proxy(t, testenv.AMQPAddr(t))
	brokerURL := fmt.Sprintf("amqp://guest:guest@%s/", proxy.Addr())
	r := relaytest.StartRelay(t, opsYAML(testenv.UniqueName("ready"), relaytest.SeedTable(db.Name),
		map[string]string{"broker": fmt.Sprintf("{url: %q}", brokerURL)}))
	base := httpAddr(t, r.App)

	ready := func() (bool, string) {
		code, body, err := get(base + "/readyz")
		return err == nil && code == http.StatusOK, body
	}
	var body string
	testenv.Eventually(t, 10*time.Second, func() bool { ok, b := ready(); body = b; return ok }, "never ready: %s", body)
	insertOrders(t, db, br.Exchange, "before", 1, 10)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= 10 }, "rows before the cut: %d", got.Len())

	cut := time.Now()
	proxy.Cut()
	testenv.Eventually(t, 10*time.Second, func() bool { ok, b := ready(); body = b; return !ok }, "still ready after the broker went away")
	t.Logf("not ready %s after the cut: %s", time.Since(cut).Round(time.Millisecond), strings.TrimSpace(body))
	if !strings.Contains(body, "broker") || strings.Contains(body, "guest:guest") {
		t.Errorf("/readyz body should name the broker, redacted: %q", body)
	}
	if code, _, _ := get(base + "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d while the broker is away: the process is alive", code)
	}
	fams, _ := scrape(t, base)
	if v, _ := value(fams, "binlog_relay_connection_up", "target", "broker"); v != 0 {
		t.Errorf("connection_up{broker} = %v while cut", v)
	}
	// Rows committed meanwhile wait, then flow.
	insertOrders(t, db, br.Exchange, "during", 1, 10)

	// Stay cut a moment, so the publisher is in its reconnect backoff.
	time.Sleep(time.Second)
	back := time.Now()
	proxy.Restore()
	testenv.Eventually(t, 30*time.Second, func() bool { ok, b := ready(); body = b; return ok }, "not ready after the broker came back: %s", body)
	t.Logf("ready again %s after the broker came back", time.Since(back).Round(time.Millisecond))
	testenv.Eventually(t, 20*time.Second, func() bool { d, _ := got.Distinct(); return d >= 20 }, "rows after the broker came back: %d", got.Len())

	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, _, err := get(base + "/readyz"); err == nil {
		t.Error("the HTTP server still answers after the relay stopped")
	}
}

// Test 3: the alert rules pass promtool (check and unit tests), the
// dashboard parses, and both use only metrics the relay exports.
func TestAlertRulesAndDashboard(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install the Debian package prometheus (apt-get install -y prometheus)")
	}
	rules := testenv.RepoPath("deploy/prometheus/alerts.yml")
	for _, args := range [][]string{{"check", "rules", rules}, {"test", "rules", testenv.RepoPath("deploy/prometheus/alerts_test.yml")}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s: %s", strings.Join(args[:2], " "), strings.TrimSpace(string(out)))
	}

	raw, err := os.ReadFile(testenv.RepoPath("deploy/grafana/binlog-relay.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if dash.Title == "" || len(exprs) < 10 {
		t.Fatalf("dashboard %q has %d queries", dash.Title, len(exprs))
	}
	// Every dashboard query is valid PromQL: promtool checks them as
	// recording rules, with Grafana's variables filled in.
	var rec strings.Builder
	rec.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	fill := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*", "$name", ".*")
	for i, e := range exprs {
		q, _ := json.Marshal(fill.Replace(e))
		fmt.Fprintf(&rec, "      - record: dashboard:query_%d\n        expr: %s\n", i, q)
	}
	recFile := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(recFile, []byte(rec.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", recFile).CombinedOutput(); err != nil {
		t.Fatalf("dashboard queries are not valid PromQL: %v\n%s", err, out)
	}

	// Every binlog_relay_* name used is one the relay exports.
	known := map[string]bool{}
	for _, n := range metrics.New().Names() {
		known[n] = true
	}
	alertsRaw, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range regexp.MustCompile(`binlog_relay_[a-z_]+`).FindAllString(string(raw)+string(alertsRaw), -1) {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_count"), "_sum")
		if !known[n] && !known[base] {
			t.Errorf("%s is used by the dashboard or the alerts but the relay does not export it", n)
		}
	}
}

// certs makes a CA, a server certificate for broker.test/redis.test and a
// client certificate with openssl, plus a second, unrelated CA.
type certs struct {
	dir                                                       string
	ca, serverCert, serverKey, clientCert, clientKey, wrongCA string
}

func makeCerts(t *testing.T) certs {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatal("openssl not found: apt-get install -y openssl")
	}
	d := t.TempDir()
	c := certs{dir: d, ca: d + "/ca.pem", serverCert: d + "/server.pem", serverKey: d + "/server.key",
		clientCert: d + "/client.pem", clientKey: d + "/client.key", wrongCA: d + "/wrong-ca.pem"}
	run := func(args ...string) {
		t.Helper()
		out, err := exec.Command("openssl", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ec := []string{"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"}
	run(append([]string{"req", "-x509", "-days", "2", "-subj", "/CN=binlog-relay test CA", "-keyout", d + "/ca.key", "-out", c.ca}, ec...)...)
	run(append([]string{"req", "-x509", "-days", "2", "-subj", "/CN=some other CA", "-keyout", d + "/wrong-ca.key", "-out", c.wrongCA}, ec...)...)
	sign := func(name, cn, ext string) {
		if err := os.WriteFile(d+"/"+name+".ext", []byte(ext), 0o600); err != nil {
			t.Fatal(err)
		}
		run(append([]string{"req", "-subj", "/CN=" + cn, "-keyout", d + "/" + name + ".key", "-out", d + "/" + name + ".csr"}, ec...)...)
		run("x509", "-req", "-days", "2", "-in", d+"/"+name+".csr", "-CA", c.ca, "-CAkey", d+"/ca.key", "-CAcreateserial",
			"-extfile", d+"/"+name+".ext", "-out", d+"/"+name+".pem")
	}
	sign("server", "broker.test", "subjectAltName=DNS:broker.test,DNS:redis.test\nextendedKeyUsage=serverAuth\n")
	sign("client", "binlog-relay", "extendedKeyUsage=clientAuth\n")
	return c
}

// serverTLS is the proxy's side: the server certificate, and a client
// certificate signed by the CA is required.
func (c certs) serverTLS(t *testing.T) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(c.serverCert, c.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pem, _ := os.ReadFile(c.ca)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
}

// Test 4: the relay talks to RabbitMQ (amqps) and Redis over TLS with a CA,
// a client certificate and a server name; a wrong CA or server name is
// refused with an error that names the connection. The server side of TLS
// is a loopback proxy (the shared RabbitMQ and Redis have no TLS listener):
// it terminates TLS, requires the client certificate, and forwards plain
// TCP to the real servers.
func TestTLSToRabbitMQAndRedis(t *testing.T) {
	testenv.Integration(t)
	c := makeCerts(t)
	amqpProxy, err := faultproxy.ListenTLS(testenv.AMQPAddr(t), c.serverTLS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer amqpProxy.Close()
	redisProxy, err := faultproxy.ListenTLS(testenv.RedisAddr, c.serverTLS(t))
	if err != nil {
		t.Fatal(err)
	}
	defer redisProxy.Close()

	tlsYAML := func(ca, name string) string {
		return fmt.Sprintf("{enabled: true, ca_file: %q, cert_file: %q, key_file: %q, server_name: %s}", ca, c.clientCert, c.clientKey, name)
	}
	sections := func(ca, brokerName, redisName string) map[string]string {
		return map[string]string{
			"broker": fmt.Sprintf("{url: %q, tls: %s}", "amqps://guest:guest@"+amqpProxy.Addr()+"/", tlsYAML(ca, brokerName)),
			"redis":  fmt.Sprintf("{addr: %q, tls: %s}", redisProxy.Addr(), tlsYAML(ca, redisName)),
		}
	}

	t.Run("works", func(t *testing.T) {
		db := testenv.NewDB(t, "schema/producer_message.sql")
		br, got := testenv.NewCollectedBroker(t)
		name := testenv.UniqueName("tls")
		r := relaytest.StartRelay(t, opsYAML(name, relaytest.SeedTable(db.Name), sections(c.ca, "broker.test", "redis.test")))
		want := insertOrders(t, db, br.Exchange, "tls", 10, 20)
		testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= len(want) }, "over TLS: received %d of %d", got.Len(), len(want))
		if amqpProxy.Live() == 0 || redisProxy.Live() == 0 {
			t.Errorf("the relay is not connected through the TLS proxies (amqp %d, redis %d)", amqpProxy.Live(), redisProxy.Live())
		}
		// The checkpoint went to Redis through TLS.
		rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
		defer rc.Close()
		testenv.Eventually(t, 10*time.Second, func() bool {
			n, _ := rc.Exists(context.Background(), "binlog-relay:"+name+":checkpoint").Result()
			return n == 1
		}, "no checkpoint saved through the Redis TLS proxy")
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
	})

	check := func(t *testing.T, s map[string]string) []preflight.Problem {
		t.Helper()
		db := testenv.NewDB(t, "schema/producer_message.sql")
		cfg, err := config.Parse([]byte(opsYAML(testenv.UniqueName("tlsbad"), relaytest.SeedTable(db.Name), s)), os.LookupEnv)
		if err != nil {
			t.Fatal(err)
		}
		a, err := app.Open(cfg, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		return a.Check(context.Background())
	}
	find := func(ps []preflight.Problem, where, text string) (preflight.Problem, bool) {
		for _, p := range ps {
			if p.Severity == preflight.Error && strings.HasPrefix(p.Where, where) && strings.Contains(p.Text, text) {
				return p, true
			}
		}
		return preflight.Problem{}, false
	}

	for _, tc := range []struct {
		name                          string
		ca, brokerServer, redisServer string
		want                          string // in the broker's and Redis's errors
	}{
		{"wrong CA", c.wrongCA, "broker.test", "redis.test", "certificate signed by unknown authority"},
		{"wrong server name", c.ca, "wrong.test", "wrong.test", "not wrong.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := check(t, sections(tc.ca, tc.brokerServer, tc.redisServer))
			for _, where := range []string{"broker amqps://guest:xxxxx@" + amqpProxy.Addr(), "redis"} {
				p, ok := find(ps, where, tc.want)
				if !ok {
					t.Errorf("no clear %s error for a %s in: %v", where, tc.name, ps)
					continue
				}
				t.Logf("%s", p)
			}
		})
	}
}

// Test 5: with passwords configured (from a file and from the environment)
// and connections failing on purpose, no log line, check output or error of
// the process carries a password.
func TestPasswordsNeverLogged(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)

	secret := func(what string) string { return fmt.Sprintf("Pw-%s-%d", what, time.Now().UnixNano()) }
	userPW, wrongSourcePW, primaryPW, brokerPW, redisPW := secret("user"), secret("src"), secret("pri"), secret("amqp"), secret("redis")
	passwords := []string{userPW, wrongSourcePW, primaryPW, brokerPW, redisPW}

	// A MySQL user with a password, on the primary (replicated to the
	// replica), with the grants the relay needs.
	user := testenv.UniqueName("relay")
	root := testenv.Open(t, testenv.PrimaryDSN, "")
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", user, userPW),
		fmt.Sprintf("GRANT %s ON *.* TO '%s'@'%%'", replicationGrants(), user),
		fmt.Sprintf("GRANT SELECT, UPDATE ON `%s`.* TO '%s'@'%%'", db.Name, user),
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatalf("%s: %v", strings.Replace(q, userPW, "***", 1), err)
		}
	}
	t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", user)) })
	db.WaitReplicated(t, 30*time.Second)

	dir := t.TempDir()
	writeSecret := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Setenv("RELAY_TEST_PRIMARY_PASSWORD", userPW)
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	ph, pp := testenv.HostPort(testenv.PrimaryDSN)
	// The good relay reads the replica through a proxy, cut once mid-run, so
	// the reconnect path logs too.
	sourceProxy := testenv.Proxy(t, testenv.Addr(testenv.ReplicaDSN))
	good := opsYAML(testenv.UniqueName("secrets"), relaytest.SeedTable(db.Name), map[string]string{
		"source":  fmt.Sprintf("{host: 127.0.0.1, port: %d, user: %s, password_file: %q}", sourceProxy.Port(), user, writeSecret("source-pw", userPW)),
		"primary": fmt.Sprintf("{host: %s, port: %d, user: %s, password: \"${RELAY_TEST_PRIMARY_PASSWORD}\"}", ph, pp, user),
		"log":     "{level: debug, format: json}",
	})
	// Every connection fails: a wrong password on the replica, nothing
	// listening for the primary and Redis, a wrong broker password.
	bad := opsYAML(testenv.UniqueName("secrets-bad"), relaytest.SeedTable(db.Name), map[string]string{
		"source":  fmt.Sprintf("{host: %s, port: %d, user: %s, password_file: %q}", sh, sp, user, writeSecret("wrong-pw", wrongSourcePW)),
		"primary": fmt.Sprintf("{host: 127.0.0.1, port: 1, user: %s, password: %q}", user, primaryPW),
		"broker":  fmt.Sprintf("{url: \"amqp://guest@%s/\", password_file: %q}", testenv.AMQPHostPort(), writeSecret("amqp-pw", brokerPW)),
		"redis":   fmt.Sprintf("{addr: \"127.0.0.1:1\", password_file: %q}", writeSecret("redis-pw", redisPW)),
		"log":     "{level: debug, format: json}",
	})
	goodPath, badPath := relaytest.WriteConfig(t, good), relaytest.WriteConfig(t, bad)
	bin := relaytest.Binary(t)

	var captured strings.Builder
	runCmd := func(wantOK bool, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		out, err := cmd.CombinedOutput()
		if (err == nil) != wantOK {
			t.Errorf("binlog-relay %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		fmt.Fprintf(&captured, "$ binlog-relay %s\n%s\n", strings.Join(args, " "), out)
		return string(out)
	}

	// The good relay: check, run (rows delivered), status, and a stop.
	runCmd(true, "check", "--config", goodPath)
	p := relaytest.StartProcess(t, goodPath)
	// Rows committed before the stream starts are the sweeper's (off here):
	// wait for the relay to be streaming.
	testenv.Eventually(t, 30*time.Second, func() bool {
		l := p.LogText()
		return strings.Contains(l, "binlog stream connected") && strings.Contains(l, "broker connected")
	}, "the relay did not start streaming")
	want := insertOrders(t, db, br.Exchange, "pw", 5, 20)
	testenv.Eventually(t, 60*time.Second, func() bool { return got.Len() >= len(want) }, "received %d of %d", got.Len(), len(want))
	sourceProxy.Cut()
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(p.LogText(), "binlog stream lost") }, "the cut was not noticed")
	sourceProxy.Restore()
	want = append(want, insertOrders(t, db, br.Exchange, "pw2", 5, 20)...)
	testenv.Eventually(t, 60*time.Second, func() bool { d, _ := got.Distinct(); return d >= len(want) }, "after the cut: received %d of %d", got.Len(), len(want))
	runCmd(true, "status", "--config", goodPath)
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(60 * time.Second); err != nil || code != 0 {
		t.Errorf("relay exit %d: %v", code, err)
	}
	captured.WriteString(p.LogText())

	// The bad one: check and run both fail, saying why.
	checkOut := runCmd(false, "check", "--config", badPath)
	runOut := runCmd(false, "run", "--config", badPath)
	runCmd(false, "status", "--config", badPath)

	all := captured.String()
	for _, want := range []string{"binlog stream connected", "binlog stream lost", "broker connected", "Access denied", "amqp://guest:xxxxx@" + testenv.AMQPHostPort() + "/", "start-up check"} {
		if !strings.Contains(all, want) {
			t.Errorf("captured output lacks %q: the test would prove nothing\n%s", want, all)
		}
	}
	if !strings.Contains(checkOut, "ERROR redis") || !strings.Contains(runOut, "start-up checks failed") {
		t.Errorf("bad config: check said\n%s\nrun said\n%s", checkOut, runOut)
	}
	for _, pw := range passwords {
		for i, line := range strings.Split(all, "\n") {
			if strings.Contains(line, pw) {
				t.Errorf("line %d carries a configured password: %s", i+1, line)
			}
		}
	}
	t.Logf("%d lines of logs and command output scanned for %d passwords", strings.Count(all, "\n"), len(passwords))
	if dump := os.Getenv("RELAY_TEST_DUMP_LOGS"); dump != "" {
		_ = os.WriteFile(dump, []byte(all), 0o600)
	}
}

// replicationGrants are the global privileges a relay user needs on the
// flavour's servers: MariaDB split REPLICATION CLIENT into BINLOG MONITOR
// and SLAVE MONITOR, MySQL kept it.
func replicationGrants() string {
	if testenv.Current.MySQL {
		return "REPLICATION SLAVE, REPLICATION CLIENT"
	}
	return "REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR"
}
