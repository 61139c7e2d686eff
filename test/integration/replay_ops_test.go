package integration

// A replay as an operator runs it in production: watched through
// --metrics-addr, and beside the live relay of the same name and table,
// whose lease, checkpoint and stream it must leave alone.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/rediskey"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// replayRun is `binlog-relay replay` running in the background.
type replayRun struct {
	cmd         *exec.Cmd
	out, stderr testenv.SyncBuffer
	done        chan error
}

// start runs `binlog-relay replay` in the background, killed at the end
// of the test if it is still running.
func (s *replaySetup) start(t *testing.T, args ...string) *replayRun {
	t.Helper()
	r := &replayRun{done: make(chan error, 1)}
	r.cmd = exec.Command(relaytest.Binary(t), append([]string{"replay", "--config", s.cfgPath}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
		r.done <- nil
	})
	return r
}

// wait waits for the replay's end and returns its exit code.
func (r *replayRun) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	err := testenv.Receive(t, r.done, within, "the replay to end")
	r.done <- err
	if r.cmd.ProcessState == nil {
		t.Fatalf("replay: %v", err)
	}
	return r.cmd.ProcessState.ExitCode()
}

// logged waits for the replay's JSON log line whose msg is msg.
func (r *replayRun) logged(t *testing.T, msg string) map[string]any {
	t.Helper()
	var line map[string]any
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("the replay to log %q", msg), func() (bool, string) {
		sc := bufio.NewScanner(strings.NewReader(r.stderr.String()))
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == msg {
				line = m
				return true, ""
			}
		}
		return false, tailOf(r.stderr.String(), 2000)
	})
	return line
}

// rewrite replaces a top-level section of the replay's config (the config
// writes each on one line, "key: {...}").
func (s *replaySetup) rewrite(t *testing.T, section, body string) {
	t.Helper()
	b, err := os.ReadFile(s.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	found := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, section+": ") {
			l, found = section+": "+body, true
		}
		lines = append(lines, l)
	}
	if !found {
		t.Fatalf("the config has no %s section:\n%s", section, b)
	}
	if err := os.WriteFile(s.cfgPath, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}

// /metrics while a replay runs, paced so that it lasts a few seconds: the
// range's size, and the published rows counted as they go, labelled with
// the relay's name and the table, and none of a relay's own series. A dry
// run publishes nothing and serves no metrics.
func TestReplayMetrics(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, relay name, proxies and metrics port
	const rows = 3000
	s := newReplaySetup(t, nil, "schema/producer_message.sql")
	insertSent(t, s.db, "producer_message", "rm", 0, rows)
	s.db.WaitReplicated(t, 60*time.Second)
	table := s.db.Name + ".producer_message"

	code, out, errOut := s.run(t, "--dry-run", "--metrics-addr", "127.0.0.1:0", "--exchange", s.br.Exchange)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("dry run: %d rows", rows)) {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, tailOf(errOut, 2000))
	}
	if strings.Contains(errOut, "replay metrics served") {
		t.Errorf("a dry run served /metrics:\n%s", tailOf(errOut, 2000))
	}

	run := s.start(t, "--exchange", s.br.Exchange, "--rate", "400/s", "--chunk-size", "200", "--metrics-addr", "127.0.0.1:0")
	base := fmt.Sprint("http://", run.logged(t, "replay metrics served")["addr"])
	labels := []string{"name", s.name, "table", table}
	// published is the counter now, or -1 and why not (the replay has
	// ended and stopped serving, or the page does not parse).
	published := func() (float64, string) {
		fams, body, err := readMetrics(base)
		if err != nil {
			return -1, err.Error()
		}
		n, _ := value(fams, "binlog_relay_replay_rows_total", append(labels, "outcome", "published")...)
		return n, excerpt(body)
	}
	var first float64
	testenv.WaitFor(t, 30*time.Second, "published rows on /metrics", func() (bool, string) {
		n, body := published()
		first = n
		return n > 0, body
	})
	fams, body := scrape(t, base)
	if n, ok := value(fams, "binlog_relay_replay_rows", labels...); !ok || n != rows {
		t.Errorf("binlog_relay_replay_rows{table=%q} %v (present %v), want %d:\n%s", table, n, ok, rows, excerpt(body))
	}
	if _, ok := value(fams, "binlog_relay_replay_rows_done", labels...); !ok {
		t.Errorf("no binlog_relay_replay_rows_done{table=%q}:\n%s", table, excerpt(body))
	}
	for name := range fams {
		if strings.HasPrefix(name, "binlog_relay_") && !strings.HasPrefix(name, "binlog_relay_replay_") {
			t.Errorf("the replay exports the relay's %s", name)
		}
	}
	if first >= rows {
		t.Fatalf("all %v rows published by the first look at /metrics: --rate did not pace the replay", first)
	}
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("published rows on /metrics to rise past %v", first), func() (bool, string) {
		n, body := published()
		return n > first, body
	})
	if code := run.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("replay exit %d\nstdout %s\nstderr %s", code, run.out.String(), tailOf(run.stderr.String(), 2000))
	}
	s.checkDelivered(t, msgIDs("rm", 1, rows))
	s.checkPrimaryUntouched(t)
}

// redisTap is a proxy to the stack's Redis that keeps every byte its
// clients send: each key a command names is in it as it is (RESP bulk
// strings), so a test can tell which keys a client touched.
type redisTap struct {
	proxy *faultproxy.Proxy
	sent  testenv.SyncBuffer
}

func newRedisTap(t *testing.T) *redisTap {
	t.Helper()
	r := &redisTap{}
	p, err := faultproxy.ListenTap(testenv.RedisAddr, func(server io.Writer, client io.Reader) {
		_, _ = io.Copy(server, io.TeeReader(client, &r.sent))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	r.proxy = p
	return r
}

// A replay beside the live relay leader of the same name and table: the
// leader keeps its lease (the same token and holder, no new term), the
// replay sends Redis no command on the lease, checkpoint or heartbeat keys
// (only on its own progress key), and the rows inserted while it runs are
// published by the relay once each, in commit order, while the replay's
// arrive once each on their side exchange.
func TestReplayBesideLiveRelay(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchanges, relay name and proxies
	const rows, batches, perBatch = 3000, 4, 25
	s := newReplaySetup(t, nil, "schema/producer_message.sql")
	insertSent(t, s.db, "producer_message", "rb", 0, rows)
	s.db.WaitReplicated(t, 60*time.Second)
	live, liveGot := testenv.NewCollectedBroker(t)
	relay := relaytest.StartedProcess(t, relaytest.WriteConfig(t, relaytest.Config{Name: s.name, Tables: s.tables,
		Sections: map[string]string{"http": `{addr: "off"}`}, Extra: "ha: {enabled: true}\n"}.YAML()))
	waitLogged(t, relay, "leader lease acquired", 1, 30*time.Second)
	keys := rediskey.For(s.name, false)
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	get := func(key string) string {
		v, err := rdb.Get(t.Context(), key).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		return v
	}
	// The first rows make the relay save a checkpoint.
	liveIDs := insertOrders(t, s.db, live.Exchange, "lv0", 1, perBatch)
	testenv.Eventually(t, 30*time.Second, func() bool { return rdb.Exists(t.Context(), keys.Checkpoint()).Val() == 1 },
		"the relay saved no checkpoint")
	leader, token := get(keys.Leader()), get(keys.Token())
	before, err := checkpoint.Decode([]byte(get(keys.Checkpoint())))
	if err != nil {
		t.Fatal(err)
	}

	tap := newRedisTap(t)
	s.rewrite(t, "redis", fmt.Sprintf("{addr: %q}", tap.proxy.Addr()))
	// --ids: the relay's first rows are SENT too, and no part of the range.
	run := s.start(t, "--ids", fmt.Sprintf("1-%d", rows), "--exchange", s.br.Exchange, "--rate", "500/s", "--chunk-size", "250")
	for b := 1; b <= batches; b++ {
		at := b * rows / (batches + 3)
		testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("%d replayed messages", at), func() (bool, string) {
			return s.got.Len() >= at, fmt.Sprintf("%d arrived", s.got.Len())
		})
		liveIDs = append(liveIDs, insertOrders(t, s.db, live.Exchange, fmt.Sprintf("lv%d", b), 1, perBatch)...)
	}
	if n := s.got.Len(); n >= rows {
		t.Fatalf("the replay had delivered all %d rows before the last live rows were inserted: they did not overlap", n)
	}
	if code := run.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("replay exit %d\nstdout %s\nstderr %s", code, run.out.String(), tailOf(run.stderr.String(), 2000))
	}
	s.checkDelivered(t, msgIDs("rb", 1, rows))
	waitDeliveredOnceInOrder(t, liveGot, liveIDs, 60*time.Second)
	if d := live.Barrier(t, liveGot, 60*time.Second); len(d) != len(liveIDs) {
		t.Errorf("the relay delivered %d messages, want its %d live rows once each", len(d), len(liveIDs))
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return statusCounts(t, s.db.Primary)["SENT"] == rows+len(liveIDs) },
		"statuses: %v, want all %d SENT", statusCounts(t, s.db.Primary), rows+len(liveIDs))

	if now := get(keys.Leader()); now != leader {
		t.Errorf("lease %s was %q before the replay, %q after: want the same leader and term", keys.Leader(), leader, now)
	}
	if now := get(keys.Token()); now != token {
		t.Errorf("lease token counter %q before the replay, %q after: a new term was drawn", token, now)
	}
	if n := len(logged(relay, "leader lease acquired")); n != 1 || len(logged(relay, "leader lease lost: stop publishing")) != 0 {
		t.Errorf("the relay acquired its lease %d times and lost it %d times, want once and never", n, len(logged(relay, "leader lease lost: stop publishing")))
	}
	after, err := checkpoint.Decode([]byte(get(keys.Checkpoint())))
	if err != nil || !after.SavedAt.After(before.SavedAt) {
		t.Errorf("checkpoint saved at %s before the replay, %s (%v) after: the relay did not keep checkpointing", before.SavedAt, after.SavedAt, err)
	}
	sent := tap.sent.String()
	for _, k := range []string{keys.Leader(), keys.Token(), keys.Checkpoint(), keys.Instance()} {
		if strings.Contains(sent, k) {
			t.Errorf("the replay sent Redis a command on the relay's %s", k)
		}
	}
	if !strings.Contains(sent, keys.Replay(s.db.Name+".producer_message")) {
		t.Errorf("the tap saw no command on the replay's progress key %s: it is not on the replay's Redis connection", keys.Replay(s.db.Name+".producer_message"))
	}
	s.checkPrimaryUntouched(t)
}
