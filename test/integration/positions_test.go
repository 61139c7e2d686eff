package integration

// Positions that survive operations: a primary switchover, a stopped SQL
// thread on the source replica, two relays with one server_id, and a purged
// position for a table without a status column. The switchover, the
// stopped thread and the purge run on the stack's switch1-3 servers
// (testenv.NewTopology), never on the shared ones.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/command"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/preflight"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// topologyYAML is opsYAML reading switch2 and writing switch1.
func topologyYAML(tp *testenv.Topology, name, tables string, sections map[string]string) string {
	sh, sp := testenv.HostPort(tp.DSN["switch2"])
	ph, pp := testenv.HostPort(tp.DSN["switch1"])
	s := map[string]string{
		"source":  fmt.Sprintf("{host: %s, port: %d, user: root}", sh, sp),
		"primary": fmt.Sprintf("{host: %s, port: %d, user: root}", ph, pp),
	}
	for k, v := range sections {
		s[k] = v
	}
	return opsYAML(name, tables, s)
}

func debeziumTable(db string) string { return fmt.Sprintf("  - {preset: debezium, schema: %s}\n", db) }

// insertOutbox writes n debezium rows (ids prefix-00001...) in transactions
// of perTx, routed to exchange, and returns their ids in commit order.
func insertOutbox(t *testing.T, db execer, exchange, prefix string, n, perTx int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i += perTx {
		var b strings.Builder
		b.WriteString("INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES ")
		var args []any
		for j := i; j < min(i+perTx, n); j++ {
			if j > i {
				b.WriteString(",")
			}
			id := fmt.Sprintf("%s-%05d", prefix, j)
			b.WriteString("(?, ?, 'a', 'ev', '{}')")
			args = append(args, id, exchange)
			ids = append(ids, id)
		}
		if _, err := db.ExecContext(context.Background(), b.String(), args...); err != nil {
			t.Fatalf("inserting outbox rows: %v", err)
		}
	}
	return ids
}

// execer is a *sql.DB or a *sql.Conn (a session with its own settings).
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// startApp runs a relay in-process like relaytest.StartRelay, with
// --accept-gap as asked and without waiting for it to stream; it returns
// the App, its warnings and its Run, stopped when the test ends.
func startApp(t *testing.T, yaml string, acceptGap bool) (*app.App, *observer.ObservedLogs, *relaytest.Background) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), os.LookupEnv)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	core, logs := observer.New(zap.WarnLevel)
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel), zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		return zapcore.NewTee(c, core)
	})))
	a, err := app.Open(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	a.AcceptGap = acceptGap
	run := relaytest.Go("the relay", 60*time.Second, a.Run)
	t.Cleanup(func() {
		if err := run.Stop(); errors.Is(err, relaytest.ErrStillRunning) {
			t.Error(err)
		}
		a.Close()
	})
	return a, logs, run
}

// waitRunning waits until an App started by startApp streams.
func waitRunning(t *testing.T, a *app.App, run *relaytest.Background) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() bool {
		if exited, err := run.Exited(); exited {
			t.Fatalf("the relay stopped: %v", err)
		}
		return a.Relay() != nil && a.Relay().Started()
	}, "the relay did not start")
}

// refusal waits up to within for an App started by startApp to stop by
// itself and returns Run's error; it fails with stillRunning if it does not.
func refusal(t *testing.T, run *relaytest.Background, within time.Duration, stillRunning string) error {
	t.Helper()
	exited, err := run.Wait(within)
	if !exited {
		t.Fatal(stillRunning)
	}
	return err
}

// stopApp stops an App started by startApp and waits for Run.
func stopApp(t *testing.T, run *relaytest.Background) {
	t.Helper()
	if err := run.Stop(); err != nil {
		t.Fatalf("stopping: %v", err)
	}
}

// loggedText reports whether any captured line (message or error) contains s.
func loggedText(logs *observer.ObservedLogs, s string) bool {
	for _, e := range logs.All() {
		if strings.Contains(e.Message, s) {
			return true
		}
		for _, f := range e.Context {
			if f.Interface != nil {
				if err, ok := f.Interface.(error); ok && strings.Contains(err.Error(), s) {
					return true
				}
			}
			if strings.Contains(f.String, s) {
				return true
			}
		}
	}
	return false
}

// topologyOutbox is a relay streaming a debezium outbox from switch2 of a
// topology of the test's own, delivering to a collected broker.
type topologyOutbox struct {
	tp   *testenv.Topology
	br   *testenv.Broker
	got  *testenv.Collector
	yaml string
	r    *relaytest.Relay
}

// startTopologyOutbox starts the relay on a new topology and sends the
// first n rows (ids first-...) through it: it returns them once they were
// all delivered.
func startTopologyOutbox(t *testing.T, name, first string, n int) (*topologyOutbox, []string) {
	t.Helper()
	o := &topologyOutbox{tp: testenv.NewTopology(t, "schema/debezium_outbox.sql")}
	o.br, o.got = testenv.NewCollectedBroker(t)
	o.yaml = topologyYAML(o.tp, testenv.UniqueName(name), debeziumTable(o.tp.DB), nil)
	o.r = relaytest.StartRelay(t, o.yaml)
	ids := o.insert(t, "switch1", first, n)
	waitAllDistinct(t, o.got, ids, 30*time.Second)
	return o, ids
}

// insert writes n rows (ids prefix-...) on server in transactions of 10.
func (o *topologyOutbox) insert(t *testing.T, server, prefix string, n int) []string {
	t.Helper()
	return insertOutbox(t, o.tp.On(t, server), o.br.Exchange, prefix, n, 10)
}

// purgeAllButCurrent rotates server's binlog and purges every file before
// the new one, so a position written before it is gone.
func purgeAllButCurrent(t *testing.T, tp *testenv.Topology, server string) {
	t.Helper()
	tp.Exec(t, server, "FLUSH BINARY LOGS")
	files := testenv.ColumnOf(t, tp.Servers[server], testenv.Current.BinlogStatusSQL(), "File")
	if len(files) == 0 {
		t.Fatal(testenv.Current.BinlogStatusSQL() + " is empty")
	}
	file := files[0]
	// MariaDB keeps a file until its binlog checkpoint is written (after
	// the storage engine flushed the commits in it), so PURGE may leave it
	// at first: repeat until the older files are gone.
	testenv.Eventually(t, 30*time.Second, func() bool {
		tp.Exec(t, server, "PURGE BINARY LOGS TO '"+file+"'")
		logs := testenv.FirstColumn(t, tp.Servers[server], "SHOW BINARY LOGS") // MySQL adds an Encrypted column
		return len(logs) > 0 && logs[0] == file
	}, "%s keeps binlogs older than %s after PURGE", server, file)
}

// (b) The primary is switched over to another server (a new server_id in
// domain 0) while the relay streams from a replica: every row arrives
// once, and a restart resumes from the checkpoint written after the switch.
func TestSwitchoverKeepsEveryRow(t *testing.T) {
	testenv.Integration(t)
	o, want := startTopologyOutbox(t, "switch", "before", 300)

	// Writes stop, switch3 takes over; switch2 (the relay's source) now
	// replicates GTIDs 0-13-N after 0-11-N.
	o.tp.Switchover(t, "switch3")
	want = append(want, o.insert(t, "switch3", "after", 300)...)
	waitAllDistinct(t, o.got, want, 30*time.Second)
	if err := o.r.Stop(); err != nil {
		t.Fatalf("stopping the relay: %v", err)
	}
	cp, err := o.r.App.Store.Load(context.Background())
	if err != nil {
		t.Fatalf("no checkpoint after the switchover: %v", err)
	}
	t.Logf("checkpoint after the switchover: %s", cp.Position())

	// Rows committed while the relay is down, then a restart.
	want = append(want, o.insert(t, "switch3", "restart", 200)...)
	r2 := relaytest.StartRelay(t, o.yaml)
	if ps := r2.App.Check(context.Background()); preflight.HasErrors(ps) {
		t.Fatalf("check after the switchover: %s", preflight.FirstError(ps))
	}
	waitDeliveredOnceInOrder(t, o.got, want, 30*time.Second)
}

// (c) The source replica's SQL thread stops: /readyz turns not ready
// within http.ready_max_lag naming the replica and its thread state, the
// metrics show it, and the sweeper still sends the row after its grace
// period.
func TestStoppedSQLThreadIsNotReady(t *testing.T) {
	testenv.Integration(t)
	tp := testenv.NewTopology(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	const maxLag = 3 * time.Second
	yaml := topologyYAML(tp, testenv.UniqueName("sqlstop"), fmt.Sprintf("  - {preset: producer-message, schema: %s}\n", tp.DB), map[string]string{
		"http":    fmt.Sprintf(`{addr: "127.0.0.1:0", ready_max_lag: %s}`, maxLag),
		"sweeper": "{enabled: true, interval: 500ms, grace_period: 2s}",
	})
	r := relaytest.StartRelay(t, yaml)
	base := httpAddr(t, r.App)
	testenv.Eventually(t, 15*time.Second, func() bool { code, _, _ := get(base + "/readyz"); return code == http.StatusOK }, "the relay is not ready")

	tp.Exec(t, "switch2", "STOP REPLICA SQL_THREAD")
	t.Cleanup(func() { _, _ = tp.Servers["switch2"].Exec("START REPLICA SQL_THREAD") })
	stopped := time.Now()
	if _, err := tp.On(t, "switch1").Exec("INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES ('stalled-1', ?, 'k', '{}')", br.Exchange); err != nil {
		t.Fatal(err)
	}
	var body string
	testenv.Eventually(t, maxLag+10*time.Second, func() bool {
		var code int
		code, body, _ = get(base + "/readyz")
		return code == http.StatusServiceUnavailable
	}, "/readyz stayed ready with the SQL thread stopped")
	took := time.Since(stopped)
	t.Logf("not ready %s after STOP REPLICA SQL_THREAD: %s", took.Round(100*time.Millisecond), strings.TrimSpace(body))
	if took > maxLag+5*time.Second {
		t.Errorf("not ready only after %s (http.ready_max_lag %s)", took, maxLag)
	}
	rh, rp := testenv.HostPort(tp.DSN["switch2"])
	addr := fmt.Sprintf("%s:%d", rh, rp)
	if !strings.Contains(body, addr) || !strings.Contains(body, "SQL thread No") {
		t.Errorf("/readyz should name the replica %s and its SQL thread: %q", addr, body)
	}
	fams, _ := scrape(t, base)
	if v, ok := value(fams, "binlog_relay_source_replica_running", "thread", "sql"); !ok || v != 0 {
		t.Errorf("source_replica_running{thread=sql} = %v (present %v), want 0", v, ok)
	}
	if v, ok := value(fams, "binlog_relay_source_replica_running", "thread", "io"); !ok || v != 1 {
		t.Errorf("source_replica_running{thread=io} = %v (present %v), want 1", v, ok)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		fams, _ := scrape(t, base)
		v, ok := value(fams, "binlog_relay_source_delay_seconds")
		return ok && v >= 2
	}, "source_delay_seconds does not grow with the SQL thread stopped")

	// The sweeper sends the row although the replica never saw it.
	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= 1 }, "the sweeper did not send the row")
	if m := got.All()[0]; m.MessageID != "stalled-1" {
		t.Fatalf("got %q", m.MessageID)
	}
	// check and status say the same, with the fix.
	var problem string
	for _, p := range r.App.Check(context.Background()) {
		if strings.Contains(p.Text, "not replicating") {
			problem = p.String()
		}
	}
	// The fix names the statement the server takes: MySQL 9 has no START SLAVE.
	start := "START SLAVE on"
	if testenv.Current.MySQL {
		start = "START REPLICA on"
	}
	if !strings.Contains(problem, "SQL thread No") || !strings.Contains(problem, start) {
		t.Errorf("check does not report the stopped SQL thread with its fix (%s): %q", start, problem)
	}
	var status strings.Builder
	if err := command.Status(context.Background(), r.App.Env(), &status); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status.String(), "SQL thread No") {
		t.Errorf("status does not show the stopped SQL thread:\n%s", status.String())
	}
	t.Logf("check: %s\nstatus:\n%s", problem, status.String())

	tp.Exec(t, "switch2", "START REPLICA SQL_THREAD")
	testenv.Eventually(t, 15*time.Second, func() bool { code, _, _ := get(base + "/readyz"); return code == http.StatusOK },
		"not ready again after START REPLICA SQL_THREAD")
	if distinct, _ := got.Distinct(); distinct != 1 {
		t.Fatalf("%d distinct messages, want 1", distinct)
	}
}

// (d) Two relays given one source.server_id: the second is refused at
// start naming the conflict. A replica that keeps taking the id from the
// running relay (the source drops the older stream each time) makes it
// retry from its position with backoff and say why, never jump: every row
// arrives, none skipped.
func TestSameServerIDNeverJumps(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	br, got := testenv.NewCollectedBroker(t)
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	id := 300000 + rand.Uint32N(1<<20)
	source := fmt.Sprintf("{host: %s, port: %d, user: root, server_id: %d}", sh, sp, id)
	a, logs, run := startApp(t, opsYAML(testenv.UniqueName("sid"), debeziumTable(db.Name), map[string]string{"source": source}), false)
	waitRunning(t, a, run)
	want := insertOutbox(t, db.Primary, br.Exchange, "one", 100, 10)
	waitAllDistinct(t, got, want, 30*time.Second)

	// A second relay with the same server_id is refused.
	_, _, run2 := startApp(t, opsYAML(testenv.UniqueName("sid2"), debeziumTable(db.Name), map[string]string{"source": source}), false)
	err := refusal(t, run2, 30*time.Second, "the second relay with the same server_id did not stop")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("source.server_id %d", id)) || !strings.Contains(err.Error(), "another replica is connected") {
		t.Fatalf("second relay: %v", err)
	}

	// Another replica with the same id connects again whenever dropped,
	// for 4 s, while rows are written.
	pos, err := testenv.Current.GTIDPos(context.Background(), testenv.Open(t, testenv.ReplicaDSN, ""))
	if err != nil {
		t.Fatal(err)
	}
	fightCtx, stopFight := context.WithTimeout(context.Background(), 4*time.Second)
	defer stopFight()
	fought := make(chan int)
	go func() {
		n := 0
		for fightCtx.Err() == nil {
			impostor := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: id, Flavor: binlogFlavor(),
				Host: sh, Port: uint16(sp), User: "root", DisableRetrySync: true, Logger: slog.New(slog.DiscardHandler)})
			set, _ := mysql.ParseGTIDSet(binlogFlavor(), pos)
			if st, err := impostor.StartSyncGTID(set); err == nil {
				n++
				for fightCtx.Err() == nil {
					if _, err := st.GetEvent(fightCtx); err != nil {
						break
					}
				}
			}
			impostor.Close()
			time.Sleep(100 * time.Millisecond)
		}
		fought <- n
	}()
	during := insertOutbox(t, db.Primary, br.Exchange, "two", 100, 10)
	want = append(want, during...)
	connects := <-fought
	t.Logf("the other replica connected %d times", connects)
	// MariaDB drops the older of two streams with one server_id; MySQL 8+
	// tells them apart by @replica_uuid and drops neither.
	// (in the relay's words: the servers' own differ, MariaDB 11.8 says "the same server_id")
	if !testenv.Current.MySQL && !loggedText(logs, "another replica uses the same server_id") {
		var seen []string
		for _, e := range logs.All() {
			if strings.Contains(e.LoggerName, "binlog") || strings.Contains(e.Message, "binlog") {
				seen = append(seen, fmt.Sprintf("%s %v", e.Message, e.ContextMap()))
			}
		}
		t.Errorf("the relay did not log the server_id conflict; its binlog log lines:\n%s", strings.Join(seen, "\n"))
	}

	want = append(want, insertOutbox(t, db.Primary, br.Exchange, "three", 100, 10)...)
	waitAllDistinct(t, got, want, 60*time.Second)
	// A stream the source dropped resumes from the last checkpoint: rows
	// confirmed after it may go out again (at least once), only rows
	// written while the two fought, and each at most once per drop (a
	// drop before the checkpoint could move republishes the same rows).
	distinct, dups := got.Distinct()
	t.Logf("%d distinct of %d rows, %d duplicates", distinct, len(want), dups)
	if distinct != len(want) {
		t.Fatalf("%d distinct of %d rows", distinct, len(want))
	}
	copies := map[string]int{}
	for _, m := range got.All() {
		copies[m.MessageID]++
	}
	inFight := map[string]bool{}
	for _, id := range during {
		inFight[id] = true
	}
	for id, n := range copies {
		if n > 1 && (!inFight[id] || n > connects+1) {
			t.Fatalf("%s arrived %d times: only rows written during the conflict may repeat, at most once per drop (%d connections of the other replica)", id, n, connects)
		}
	}
	assertSameOrder(t, firstSeenOrder(got.All()), want)
	if v, _ := value(gatherApp(t, a), "binlog_relay_gaps_total"); v != 0 {
		t.Fatalf("gaps_total = %v after a server_id conflict: the relay jumped", v)
	}
}

// (e) The position of a relay reading a debezium table (no status column)
// is purged from the source: `run` refuses without --accept-gap, naming
// what would be lost; with it, it starts at the current position and
// counts the gap.
func TestPurgedPositionNeedsAcceptGap(t *testing.T) {
	testenv.Integration(t)
	o, first := startTopologyOutbox(t, "purged", "first", 50)
	tp, got, yaml := o.tp, o.got, o.yaml
	if err := o.r.Stop(); err != nil {
		t.Fatal(err)
	}

	// Rows committed while the relay is down, then their binlog purged.
	lost := o.insert(t, "switch1", "lost", 50)
	tp.WaitReplicated(t, "switch2", 30*time.Second)
	purgeAllButCurrent(t, tp, "switch2")

	// Without --accept-gap: refused, in-process and by the command.
	_, _, run := startApp(t, yaml, false)
	err := refusal(t, run, 60*time.Second, "run did not refuse the purged position")
	for _, w := range []string{"purged", tp.DB + ".outbox", "--accept-gap", "without a status column"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("run without --accept-gap: %v (want it to say %q)", err, w)
		}
	}
	t.Logf("refused: %v", err)
	cfgPath := relaytest.WriteConfig(t, yaml)
	p := relaytest.StartProcess(t, cfgPath)
	if code, err := p.Wait(60 * time.Second); err != nil || code != 1 {
		t.Fatalf("binlog-relay run: exit %d, %v", code, err)
	}
	if l := p.LogText(); !strings.Contains(l, "--accept-gap") || !strings.Contains(l, tp.DB+".outbox") {
		t.Fatalf("binlog-relay run does not say what would be lost:\n%s", l)
	}

	// With it: starts at the current position, counts the gap; new rows flow.
	cmd := exec.Command(relaytest.Binary(t), "run", "--accept-gap", "--config", cfgPath)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &syncWriter{w: &out}, &syncWriter{w: &out}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	testenv.Eventually(t, 60*time.Second, func() bool {
		l := syncString(&out)
		return strings.Contains(l, `"handling":"accepted"`) && strings.Contains(l, "binlog stream connected")
	}, "run --accept-gap did not take the gap and stream:\n%s", syncString(&out))
	after := o.insert(t, "switch1", "after", 50)
	waitAllDistinct(t, got, append(first, after...), 30*time.Second)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("run --accept-gap after SIGTERM: %v\n%s", err, syncString(&out))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("run --accept-gap did not stop on SIGTERM")
	}
	for _, m := range got.All() {
		if strings.HasPrefix(m.MessageID, "lost-") {
			t.Fatalf("%s was in the purged range, yet delivered", m.MessageID)
		}
	}
	t.Logf("accepted the gap: %d rows in it not sent, %d delivered", len(lost), got.Len())
}

// gatherApp reads an in-process relay's metrics without HTTP.
func gatherApp(t *testing.T, a *app.App) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := a.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range mfs {
		out[f.GetName()] = f
	}
	return out
}

// A relay that saved a checkpoint before finds none (Redis lost it): for a
// table without a status column that is a gap, refused without
// --accept-gap, for `run` and for an HA standby that becomes leader alike;
// a first start is not.
func TestLostCheckpointIsAGap(t *testing.T) {
	testenv.Integration(t)
	for _, ha := range []bool{false, true} {
		t.Run(fmt.Sprintf("ha=%v", ha), func(t *testing.T) {
			db := testenv.NewDB(t, "schema/debezium_outbox.sql")
			br, got := testenv.NewCollectedBroker(t)
			sections := map[string]string{}
			if ha {
				sections["ha"] = "{enabled: true, lease_ttl: 2s}"
			}
			name := testenv.UniqueName("lostcp")
			yaml := opsYAML(name, debeziumTable(db.Name), sections)
			// First start ever: no checkpoint, no marker, no refusal.
			a, _, run := startApp(t, yaml, false)
			waitRunning(t, a, run)
			first := insertOutbox(t, db.Primary, br.Exchange, "first", 20, 10)
			waitAllDistinct(t, got, first, 30*time.Second)
			rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
			defer rc.Close()
			key := "binlog-relay:" + name + ":checkpoint"
			testenv.Eventually(t, 10*time.Second, func() bool { return rc.Exists(context.Background(), key+":first-saved").Val() == 1 },
				"no first-save marker")
			// The save of the last batch lands after its messages: wait for
			// it, or it could write the checkpoint back after Redis lost it.
			waitCheckpointCovers(t, key, primaryGTID(t, db))

			var err error
			if ha {
				// A standby passes its start-up checks while the
				// checkpoint is there; then Redis loses it and the
				// leader stops: the standby leads and must refuse.
				standby, _, standbyRun := startApp(t, yaml, false)
				// Its HTTP server starts once the start-up checks passed.
				testenv.Eventually(t, 30*time.Second, func() bool { return standby.HTTPAddr() != "" }, "the standby did not pass its checks")
				rc.Del(context.Background(), key)
				// A leader that dies without its drain (a graceful stop
				// would write the position back, below) leaves it lost.
				a.Relay().Abort(errors.New("the leader dies (test)"))
				_ = run.Stop()
				err = refusal(t, standbyRun, 60*time.Second, "the standby led without the lost checkpoint")
			} else {
				// Redis loses the checkpoint while the relay runs idle: its
				// stop writes the position back, so the next start is no gap.
				rc.Del(context.Background(), key)
				stopApp(t, run)
				if rc.Exists(context.Background(), key).Val() != 1 {
					t.Fatal("the stop did not write back the checkpoint Redis lost")
				}
				rc.Del(context.Background(), key)
				_, _, run = startApp(t, yaml, false)
				err = refusal(t, run, 60*time.Second, "the relay started without its lost checkpoint")
			}
			for _, w := range []string{"Redis lost it", db.Name + ".outbox", "--accept-gap"} {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("run: %v (want it to say %q)", err, w)
				}
			}
			insertOutbox(t, db.Primary, br.Exchange, "lost", 20, 10)
			a, _, run = startApp(t, yaml, true)
			waitRunning(t, a, run)
			after := insertOutbox(t, db.Primary, br.Exchange, "after", 20, 10)
			waitAllDistinct(t, got, append(first, after...), 30*time.Second)
			if v, _ := value(gatherApp(t, a), "binlog_relay_gaps_total", "handling", "accepted"); v != 1 {
				t.Fatalf("gaps_total{handling=accepted} = %v, want 1", v)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// syncWriter lets a child process's stdout and stderr share a builder.
type syncWriter struct{ w *strings.Builder }

var syncMu sync.Mutex

func (s *syncWriter) Write(p []byte) (int, error) {
	syncMu.Lock()
	defer syncMu.Unlock()
	return s.w.Write(p)
}

func syncString(b *strings.Builder) string {
	syncMu.Lock()
	defer syncMu.Unlock()
	return b.String()
}

// Two relays with one name (no ha.enabled) would write one checkpoint: the
// second is refused once the first's heartbeat proves it alive.
func TestSameNameRefused(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, names and proxies; no server restarted (main_test.go)
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	name := testenv.UniqueName("samename")
	yaml := opsYAML(name, debeziumTable(db.Name), nil)
	a, _, run := startApp(t, yaml, false)
	waitRunning(t, a, run)
	start := time.Now()
	_, _, run2 := startApp(t, yaml, false)
	err := refusal(t, run2, 60*time.Second, "a second relay with the same name started")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("another relay named %q is running", name)) || !strings.Contains(err.Error(), "ha.enabled") {
		t.Fatalf("second relay: %v", err)
	}
	t.Logf("refused after %s: %v", time.Since(start).Round(100*time.Millisecond), err)
	var problems []string
	for _, p := range a.Check(context.Background()) {
		problems = append(problems, p.String())
	}
	// The running relay's own check sees its own heartbeat: no warning.
	if strings.Contains(strings.Join(problems, "\n"), "another relay named") {
		t.Fatalf("the running relay reports itself as a duplicate: %v", problems)
	}
	if exited, err := run.Exited(); exited {
		t.Fatalf("the first relay stopped: %v", err)
	}
}
