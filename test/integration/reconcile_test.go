package integration

// Reconciliation end to end: messages lost on purpose between the outbox
// and a pkg/inbox consumer, found by `binlog-relay reconcile` from the
// replica, then sent again by --repair and processed once.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/command"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/binlog-relay/binlog-relay/internal/reconcile"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

// The seed's dedup table and processing log (testdata/seed/seed-ddl.sql).
const msgDedupDDL = "CREATE TABLE `t_msg_dedup` (`msg_id` varchar(64) NOT NULL, `create_time` datetime NOT NULL, PRIMARY KEY (`msg_id`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;" +
	"CREATE TABLE `t_message_log` (`id` bigint NOT NULL AUTO_INCREMENT, `msg_id` varchar(64) NOT NULL, `topic` varchar(128) NOT NULL, `tag` varchar(128) DEFAULT NULL, `key` varchar(128) DEFAULT NULL," +
	" `status` varchar(32) NOT NULL, `retry_count` int NOT NULL DEFAULT '0', `error` text, `create_time` datetime NOT NULL, `update_time` datetime DEFAULT NULL," +
	" PRIMARY KEY (`id`), UNIQUE KEY `uk_msg_id` (`msg_id`), KEY `idx_status` (`status`), KEY `idx_create_time` (`create_time`)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;" +
	"CREATE TABLE audit_entries (message_id VARCHAR(64) NOT NULL) ENGINE=InnoDB"

// runInbox runs a pkg/inbox consumer until the test ends.
func runInbox(t *testing.T, cfg inbox.Config, db *sql.DB, h inbox.Handler, opts ...inbox.Option) {
	t.Helper()
	cfg.URL = testenv.AMQPURL
	relaytest.StartInbox(t, cfg, db, h, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), opts...)
}

// rogueConsumer acks every message of queue without recording anything
// (a consumer with a bug) until stop; it returns the ids it swallowed.
func rogueConsumer(t *testing.T, queue string) (got func() []string, stop func()) {
	t.Helper()
	conn, ch := testenv.Dial(t)
	deliveries, err := ch.Consume(queue, "rogue", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ids []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for d := range deliveries {
			mu.Lock()
			ids = append(ids, d.MessageId)
			mu.Unlock()
			_ = d.Ack(false)
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { _ = ch.Cancel("rogue", false); <-done; _ = conn.Close() }) }
	t.Cleanup(stop)
	return func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(ids) }, stop
}

// insertOutbox inserts rows with the given message ids and routing key.
func insertMessages(t *testing.T, db *testenv.DB, exchange, routingKey string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, ?, '{}')`, id, exchange, routingKey)
	}
}

func seqIDs(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return out
}

// reconcileCLI runs `binlog-relay reconcile --format json` and returns its
// exit code and report.
func reconcileCLI(t *testing.T, cfgPath string, extra ...string) (int, *reconcile.Report) {
	t.Helper()
	cmd := exec.Command(relaytest.Binary(t), append([]string{"reconcile", "--config", cfgPath, "--format", "json"}, extra...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 0 && code != 1 {
		t.Fatalf("reconcile exit %d\nstdout %s\nstderr %s", code, out, stderr.String())
	}
	var rep reconcile.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("reconcile exit %d: %v\nstdout %s\nstderr %s", code, err, out, stderr.String())
	}
	return code, &rep
}

func sortedIDs(l reconcile.IDs) []string { s := slices.Clone(l.IDs); slices.Sort(s); return s }

func pairOf(t *testing.T, rep *reconcile.Report, consumer string) *reconcile.PairReport {
	t.Helper()
	for _, p := range rep.Tables[0].Consumers {
		if p.Consumer == consumer {
			return p
		}
	}
	t.Fatalf("no figures for consumer %s", consumer)
	return nil
}

// The done-when test of reconciliation: ten messages swallowed by a
// consumer that acks without recording, ten purged from the queue, a row
// recorded twice in a processing log, a message the consumer FAILED, a row
// left PENDING, one FAILED in the outbox and an inbox row no outbox row
// explains. reconcile reports exactly those ids (and the periodic run in
// `run` the same counts as metrics); --repair gets every lost message
// processed once, through the sweeper and pkg/inbox.
func TestReconcileFindsLossesAndRepairs(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, names and proxies; no server restarted (main_test.go)
	began := time.Now()
	db := testenv.NewDB(t, "schema/producer_message.sql", "schema/consumer_message.sql")
	db.Exec(t, "CREATE TABLE stock_moves (message_id VARCHAR(128) NOT NULL) ENGINE=InnoDB")
	audit := testenv.NewDB(t)
	audit.Exec(t, msgDedupDDL)
	audit.WaitReplicated(t, 30*time.Second)
	br := testenv.NewBroker(t) // queue bound with #: the inventory's
	auditQ := testenv.UniqueName("q_audit")
	br.DeclareQueue(t, auditQ, "order.paid")

	rh, rp := testenv.HostPort(testenv.ReplicaDSN)
	reconcileYAML := fmt.Sprintf(`{interval: 1s, grace_period: 1s, pending_after: 10m, max_ids: 100, consumers: [
  {name: inventory, dsn: %q, schema: %s, consumer: inventory},
  {name: audit, mysql: {host: %s, port: %d, user: root}, schema: %s, preset: msg-dedup, log_table: t_message_log, routing_keys: ["order.paid"]}]}`,
		testenv.ReplicaDSN, db.Name, rh, rp, audit.Name)
	yaml := opsYAML(testenv.UniqueName("recon"), relaytest.SeedTable(db.Name), map[string]string{
		"sweeper": "{interval: 200ms, grace_period: 3s}", "retry": "{base: 200ms, factor: 2, max: 5s}",
		"reconcile": reconcileYAML})
	cfgPath := relaytest.WriteConfig(t, yaml)
	r := relaytest.StartRelay(t, yaml)

	// The audit service handles order.paid through t_msg_dedup and its log;
	// one message is malformed for it.
	const malformed = "c-004"
	runInbox(t, inbox.Config{Queue: auditQ, ConsumerName: "audit", Preset: "msg-dedup", LogTable: "t_message_log"}, audit.Primary,
		func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			if m.ID == malformed {
				return inbox.Malformed(errors.New("no order number"))
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO audit_entries (message_id) VALUES (?)", m.ID)
			return err
		})

	// 1. A consumer that acks without recording swallows ten messages.
	swallowed, stopRogue := rogueConsumer(t, br.Queue)
	lost := seqIDs("a", 0, 10)
	insertMessages(t, db, br.Exchange, "order.created", lost...)
	testenv.Eventually(t, 30*time.Second, func() bool { return len(swallowed()) == 10 }, "the rogue consumer got %d of 10", len(swallowed()))
	stopRogue()

	// 2. Ten more reach the queue while nobody consumes it, and the queue
	// is purged.
	purged := seqIDs("b", 0, 10)
	insertMessages(t, db, br.Exchange, "order.created", purged...)
	ch := amqpChannel(t)
	testenv.Eventually(t, 30*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive(br.Queue, true, false, false, false, nil)
		return err == nil && q.Messages == 10
	}, "the ten messages did not reach the queue")
	if n, err := ch.QueuePurge(br.Queue, false); err != nil || n != 10 {
		t.Fatalf("purge: %d messages, %v", n, err)
	}
	lost = append(lost, purged...)

	// 3. The inventory's pkg/inbox consumer starts; twenty messages flow,
	// every other one also to the audit service.
	runInbox(t, inbox.Config{Queue: br.Queue, ConsumerName: "inventory"}, db.Primary,
		func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO stock_moves (message_id) VALUES (?)", m.ID)
			return err
		})
	flowing := seqIDs("c", 0, 20)
	for i, id := range flowing {
		rk := "order.created"
		if i%2 == 0 {
			rk = "order.paid"
		}
		insertMessages(t, db, br.Exchange, rk, id)
	}
	testenv.Eventually(t, 30*time.Second, func() bool {
		return db.Count(t, "SELECT COUNT(*) FROM stock_moves") == 20 &&
			audit.Count(t, "SELECT COUNT(*) FROM t_msg_dedup") == 9 &&
			audit.Count(t, "SELECT COUNT(*) FROM t_message_log WHERE status = 'FAILED'") == 1
	}, "consumers did not process the flowing messages: inventory %d of 20, audit %d of 9", db.Count(t, "SELECT COUNT(*) FROM stock_moves"),
		audit.Count(t, "SELECT COUNT(*) FROM t_msg_dedup"))

	// 4. By hand: a processing-log row recorded twice (the log's unique key
	// dropped), a row left PENDING (not due for a day: the sweeper leaves
	// it), one FAILED in the outbox, and an inbox row of a message from
	// elsewhere.
	const dup = "c-002"
	audit.Exec(t, "ALTER TABLE t_message_log DROP INDEX uk_msg_id")
	audit.WaitReplicated(t, 30*time.Second) // the relay reads the table on the replica
	audit.Exec(t, "INSERT INTO t_message_log (msg_id, topic, tag, status, create_time) SELECT msg_id, topic, tag, status, create_time FROM t_message_log WHERE msg_id = ?", dup)
	db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content, status, create_time) VALUES
		('left-pending', ?, 'order.created', '{}', 'SENT', NOW(3) - INTERVAL 1 HOUR), ('gave-up', ?, 'order.created', '{}', 'SENT', NOW(3))`, br.Exchange, br.Exchange)
	db.Exec(t, "UPDATE producer_message SET status = 'PENDING', next_retry_time = NOW(3) + INTERVAL 1 DAY WHERE message_id = 'left-pending'")
	db.Exec(t, "UPDATE producer_message SET status = 'FAILED', error_msg = 'by hand' WHERE message_id = 'gave-up'")
	db.Exec(t, "INSERT INTO consumer_message (consumer, message_id, status, content) VALUES ('inventory', 'from-elsewhere', 'SUCCESS', '')")
	db.WaitReplicated(t, 30*time.Second)
	audit.WaitReplicated(t, 30*time.Second)

	// Every finding, exactly, once the last SENT mark is a grace period old.
	var rep *reconcile.Report
	var code int
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, rep = reconcileCLI(t, cfgPath)
		return len(rep.Tables) == 1 && pairOf(t, rep, "inventory").InGrace == 0 && pairOf(t, rep, "audit").InGrace == 0
	}, "rows still in the grace period")
	tr := rep.Tables[0]
	inv, aud := pairOf(t, rep, "inventory"), pairOf(t, rep, "audit")
	slices.Sort(lost)
	checkIDs := func(what string, got reconcile.IDs, want ...string) {
		t.Helper()
		if got.Count != int64(len(want)) || !slices.Equal(sortedIDs(got), want) {
			t.Errorf("%s: %d %v, want %v", what, got.Count, sortedIDs(got), want)
		}
	}
	checkIDs("inventory missing", inv.Missing, lost...)
	checkIDs("inventory duplicates", inv.Duplicates)
	checkIDs("inventory failed", inv.Failed)
	checkIDs("audit missing", aud.Missing)
	checkIDs("audit duplicates", aud.Duplicates, dup)
	checkIDs("audit failed", aud.Failed, malformed)
	checkIDs("pending too long", tr.PendingStale, "left-pending")
	checkIDs("FAILED in the outbox", tr.Failed, "gave-up")
	checkIDs("repairable", tr.Repair.Repairable, lost...)
	checkIDs("kept", tr.Repair.Kept)
	if inv.Expected != 40 || inv.Processed != 20 || aud.Expected != 10 || aud.Processed != 9 {
		t.Errorf("expected/processed: inventory %d/%d, audit %d/%d; want 40/20, 10/9", inv.Expected, inv.Processed, aud.Expected, aud.Processed)
	}
	for _, c := range rep.Consumers {
		switch c.Consumer {
		case "inventory":
			checkIDs("processed without outbox row at inventory", c.Orphans, "from-elsewhere")
		case "audit":
			checkIDs("processed without outbox row at audit", c.Orphans)
		}
		if c.Skipped != "" {
			t.Errorf("%s: orphans not checked: %s", c.Consumer, c.Skipped)
		}
	}
	if code != 1 || rep.Differences != 20+1+1+1+1+1 {
		t.Fatalf("exit %d, %d differences; want 1, 25", code, rep.Differences)
	}

	// The periodic run inside `run` publishes the same counts, and status
	// shows its last result.
	base := httpAddr(t, r.App)
	testenv.Eventually(t, 20*time.Second, func() bool {
		fams, _ := scrape(t, base)
		missing, _ := value(fams, "binlog_relay_reconcile_missing", "consumer", "inventory")
		dups, _ := value(fams, "binlog_relay_reconcile_duplicates", "consumer", "audit")
		diff, _ := value(fams, "binlog_relay_reconcile_differences")
		last, _ := value(fams, "binlog_relay_reconcile_last_success_timestamp_seconds")
		return missing == 20 && dups == 1 && diff == 25 && last > float64(began.Unix())
	}, "the periodic reconciliation's metrics")
	var status strings.Builder
	if err := command.Status(context.Background(), r.App.Env(), &status); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status.String(), "reconcile    last run") || !strings.Contains(status.String(), "25 differences (missing 20, duplicates 1") {
		t.Errorf("status does not show the last reconciliation:\n%s", status.String())
	}

	// --repair resets exactly the lost rows; they are sent again (by the
	// binlog path, or the sweeper) and the inventory processes each once.
	code, rep = reconcileCLI(t, cfgPath, "--repair")
	if code != 1 {
		t.Errorf("--repair exit %d, want 1 (differences were found)", code)
	}
	checkIDs("reset", rep.Tables[0].Repair.Reset, lost...)
	testenv.Eventually(t, 60*time.Second, func() bool { return db.Count(t, "SELECT COUNT(*) FROM stock_moves") >= 40 },
		"lost messages processed after the repair: %d of 20", db.Count(t, "SELECT COUNT(*) FROM stock_moves")-20)
	if n := db.Count(t, "SELECT COUNT(*) FROM (SELECT message_id FROM stock_moves GROUP BY message_id HAVING COUNT(*) > 1) d"); n != 0 {
		t.Errorf("%d messages processed more than once", n)
	}
	if n := db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE error_msg LIKE 'reset to pending by reconcile%'"); n != 20 {
		t.Errorf("%d rows carry the repair note, want 20 (the lost ones)", n)
	}
	db.WaitReplicated(t, 30*time.Second)
	// The binlog path publishes the reset rows as it reads the reset (before
	// the sweeper), and marks them SENT in its next batch, which can land
	// after the consumer processed them: reconcile judges SENT rows only.
	testenv.Eventually(t, 30*time.Second, func() bool {
		code, rep = reconcileCLI(t, cfgPath)
		inv := pairOf(t, rep, "inventory")
		return inv.Expected == 40 && inv.Missing.Count == 0 && inv.InGrace == 0
	}, "still missing after the repair: %v", sortedIDs(pairOf(t, rep, "inventory").Missing))
	inv = pairOf(t, rep, "inventory")
	if inv.Processed != 40 || rep.Tables[0].Repair.Repairable.Count != 0 || rep.Differences != 5 || code != 1 {
		t.Errorf("after the repair: processed %d of 40, repairable %d, %d differences (want the 5 planted), exit %d",
			inv.Processed, rep.Tables[0].Repair.Repairable.Count, rep.Differences, code)
	}
	t.Logf("reconcile found and repaired 20 lost messages in %s", time.Since(began).Round(time.Millisecond))
}

// amqpChannel opens a channel to the stack's broker for the test.
func amqpChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	_, ch := testenv.Dial(t)
	return ch
}
