package integration

// The outbox lifecycle against the real stack: broker outages, failed
// publishes and their retries, purged binlogs, several sweepers on one
// backlog beside busy writers, zombies, a primary free of polling, requeue
// and archive. No test here calls t.Parallel: test 6 reads the primary's
// global Com_select.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/command"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/app"
	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// lifecycleConfig is a relay config for db's seed table with the retry and
// sweeper sections: a fast backoff and the given sweeper fields, so the
// suite runs in seconds, not minutes.
func lifecycleConfig(name string, db *testenv.DB, sweeper string) string {
	return relaytest.RelayConfig(testenv.UniqueName(name), relaytest.SeedTable(db.Name),
		"retry: {base: 200ms, factor: 2, max: 5s}\nsweeper: {"+sweeper+"}\n")
}

// insertAged inserts n outbox rows for exchange, created (and last updated)
// age ago, with the given status, in statements of 1,000 rows. It returns
// their message ids.
func insertAged(t *testing.T, db *testenv.DB, exchange, prefix, status string, n int, age time.Duration) []string {
	t.Helper()
	ids := make([]string, 0, n)
	for start := 0; start < n; start += 1000 {
		var b strings.Builder
		b.WriteString("INSERT INTO producer_message (message_id, exchange, routing_key, content, status, create_time, update_time) VALUES ")
		for i := start; i < min(start+1000, n); i++ {
			id := fmt.Sprintf("%s-%06d", prefix, i)
			ids = append(ids, id)
			if i > start {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s', '%s', 'order.created', '{\"n\":%d}', '%s', NOW(3) - INTERVAL %[5]d MICROSECOND, NOW(3) - INTERVAL %[5]d MICROSECOND)",
				id, exchange, i, status, age.Microseconds())
		}
		db.Exec(t, b.String())
	}
	return ids
}

// rowState is one outbox row as the primary has it.
type rowState struct {
	ID         int64
	Status     string
	RetryCount int
	Version    int
	Error      string
	// RetryIn is next_retry_time - update_time: the backoff the last
	// failure scheduled (when next_retry_time is set).
	RetryIn time.Duration
}

func readRow(t *testing.T, db *testenv.DB, messageID string) rowState {
	t.Helper()
	var r rowState
	var errMsg sql.NullString
	var retryIn sql.NullInt64
	err := db.Primary.QueryRow(`SELECT id, status, retry_count, version, error_msg,
		TIMESTAMPDIFF(MICROSECOND, update_time, next_retry_time) FROM producer_message WHERE message_id = ?`, messageID).
		Scan(&r.ID, &r.Status, &r.RetryCount, &r.Version, &errMsg, &retryIn)
	if err != nil {
		t.Fatalf("reading row %s: %v", messageID, err)
	}
	r.Error, r.RetryIn = errMsg.String, time.Duration(retryIn.Int64)*time.Microsecond
	return r
}

// deliveredOnce checks that every id arrived exactly once and returns the
// number of duplicates of any message.
func deliveredCounts(got *testenv.Collector) map[string]int {
	counts := map[string]int{}
	for _, d := range got.All() {
		counts[d.MessageID]++
	}
	return counts
}

// sweeperProcess is `binlog-relay sweep` run in-process.
type sweeperProcess struct {
	App *app.App
	*relaytest.Background
}

func startSweeper(t *testing.T, yaml string) *sweeperProcess {
	t.Helper()
	a := relaytest.OpenApp(t, yaml)
	s := &sweeperProcess{App: a, Background: relaytest.Go("sweeper", 30*time.Second, func(ctx context.Context) error { return command.Sweep(ctx, a.Env()) })}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// Test 1: the broker goes away for 30 s while 5,000 rows are committed, then
// comes back: every row arrives and ends SENT, none FAILED.
//
// The shared RabbitMQ cannot be stopped (other suites use it), so the relay
// reaches it through a fault proxy. Cut resets every connection and every new
// one (RST) for the 30 s, which is what a client sees of a stopped or
// unreachable broker: its publishes and confirms are lost with the
// connection, and reconnects are refused until Restore.
func TestBrokerOutageThirtySeconds(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	proxy := testenv.Proxy(t, testenv.AMQPAddr(t))
	cfg := lifecycleConfig("outage", db, "interval: 200ms, grace_period: 60s")
	cfg = strings.Replace(cfg, testenv.AMQPURL, "amqp://guest:guest@"+proxy.Addr()+"/", 1)
	r := relaytest.StartRelay(t, cfg)

	proxy.Cut()
	cutAt := time.Now()
	var want []string
	for i := 0; i < 500; i++ {
		want = append(want, insertOrders(t, db, br.Exchange, fmt.Sprintf("out%03d", i), 1, 10)...)
		time.Sleep(40 * time.Millisecond)
	}
	if got.Len() != 0 {
		t.Fatalf("%d messages arrived while the broker was cut off", got.Len())
	}
	time.Sleep(time.Until(cutAt.Add(30 * time.Second)))
	proxy.Restore()
	restoredAt := time.Now()

	testenv.Eventually(t, 60*time.Second, func() bool { d, _ := got.Distinct(); return d >= len(want) },
		"after the broker came back: %d of %d distinct messages", got.Len(), len(want))
	counts := deliveredCounts(got)
	for _, id := range want {
		if counts[id] == 0 {
			t.Fatalf("message %s never arrived", id)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"statuses: %v", statusCounts(t, db.Primary))
	if n := statusCounts(t, db.Primary)["FAILED"]; n != 0 {
		t.Fatalf("%d rows FAILED", n)
	}
	_, dups := got.Distinct()
	t.Logf("5,000 rows delivered %s after the broker came back (%d duplicates from republishing unconfirmed messages)",
		time.Since(restoredAt).Round(time.Millisecond), dups)
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// Test 2: a row routed to an exchange that does not exist is retried with a
// growing next_retry_time, then FAILED with the broker's reason after
// max_retry_count attempts; rows committed after it still arrive.
func TestSweeperRetriesMissingExchangeThenFails(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, lifecycleConfig("noexch", db, "interval: 100ms, grace_period: 1s"))

	missing := testenv.UniqueName("no_such_exchange")
	db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content, max_retry_count)
		VALUES ('bad-1', ?, 'order.created', '{}', 4)`, missing)
	want := insertOrders(t, db, br.Exchange, "after", 10, 10)

	// Watch the row: the backoff each failure scheduled, by retry count.
	backoffs := map[int]time.Duration{}
	var last rowState
	testenv.Eventually(t, 30*time.Second, func() bool {
		last = readRow(t, db, "bad-1")
		if last.Status == "PENDING" && last.RetryCount > 0 {
			backoffs[last.RetryCount] = last.RetryIn
		}
		return last.Status == "FAILED"
	}, "row bad-1 never FAILED: %+v", last)
	if last.RetryCount != 4 {
		t.Errorf("FAILED after %d attempts, want max_retry_count 4", last.RetryCount)
	}
	if !strings.Contains(last.Error, "404") || !strings.Contains(last.Error, missing) {
		t.Errorf("error_msg %q does not carry the broker's reason (404, exchange %s)", last.Error, missing)
	}
	t.Logf("backoff by retry count: %v; error_msg %q", backoffs, last.Error)
	if len(backoffs) < 3 {
		t.Fatalf("saw backoffs for retries %v, want 1, 2 and 3", backoffs)
	}
	for n := 2; n <= 3; n++ {
		if backoffs[n] <= backoffs[n-1] {
			t.Errorf("backoff after attempt %d (%s) is not longer than after attempt %d (%s)", n, backoffs[n], n-1, backoffs[n-1])
		}
	}

	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= len(want) },
		"%d of %d rows after the bad one arrived", got.Len(), len(want))
	counts := deliveredCounts(got)
	for _, id := range want {
		if counts[id] != 1 {
			t.Fatalf("message %s arrived %d times", id, counts[id])
		}
	}
	if counts["bad-1"] != 0 {
		t.Fatal("the row for a missing exchange was delivered")
	}
}

// Test 3: the relay is stopped with a saved checkpoint, 20,000 rows are
// committed, the replica's binlogs holding them are purged, and the relay is
// started again: it restarts at the current position and every row arrives,
// sent by the sweeper.
func TestPurgedBinlogRowsArriveViaSweeper(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	cfg := lifecycleConfig("purge", db, "interval: 200ms, grace_period: 1s")

	r1 := relaytest.StartRelay(t, cfg)
	first := insertOrders(t, db, br.Exchange, "before", 1, 10)
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, saved := r1.App.Relay().LastCheckpoint()
		return got.Len() >= len(first) && saved && statusCounts(t, db.Primary)["SENT"] == len(first)
	}, "first rows not relayed and checkpointed")
	if err := r1.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // past the last checkpoint save

	gap := insertOrders(t, db, br.Exchange, "gap", 40, 500)
	db.WaitReplicated(t, 60*time.Second)
	purgeReplicaBinlogs(t, db.Replica)

	start := time.Now()
	r2 := relaytest.StartRelay(t, cfg)
	total := len(first) + len(gap)
	testenv.Eventually(t, 90*time.Second, func() bool { d, _ := got.Distinct(); return d >= total },
		"%d of %d distinct messages after the purge", got.Len(), total)
	counts := deliveredCounts(got)
	for _, id := range gap {
		if counts[id] == 0 {
			t.Fatalf("message %s never arrived", id)
		}
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == total },
		"statuses: %v", statusCounts(t, db.Primary))
	if n := r2.App.Relay().Stats.Published.Load(); n != 0 {
		t.Errorf("the binlog path published %d rows; the purged ones can only come from the sweeper", n)
	}
	_, dups := got.Distinct()
	t.Logf("20,000 rows from the purged binlog delivered by the sweeper in %s (%d duplicates)", time.Since(start).Round(time.Millisecond), dups)
	if err := r2.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// purgeReplicaBinlogs rotates the replica's binlog and purges every file
// before the new one. MariaDB keeps (with only a warning) a file a binlog
// dump thread is still reading, such as the stopped relay's until the server
// notices it is gone, or another suite's relay catching up; so purge until
// the old files are really gone.
func purgeReplicaBinlogs(t *testing.T, replica *sql.DB) {
	t.Helper()
	if _, err := replica.Exec("FLUSH BINARY LOGS"); err != nil {
		t.Fatal(err)
	}
	var current string
	testenv.Eventually(t, 30*time.Second, func() bool {
		logs := binaryLogs(t, replica)
		current = logs[len(logs)-1]
		if _, err := replica.Exec("PURGE BINARY LOGS TO '" + current + "'"); err != nil {
			t.Fatalf("purging the replica's binlogs: %v", err)
		}
		return len(binaryLogs(t, replica)) == 1
	}, "the replica keeps binlogs before %s: %v (a binlog dump thread still reads them)", current, binaryLogs(t, replica))
	t.Logf("replica binlogs purged: only %s is left", current)
}

func binaryLogs(t *testing.T, db *sql.DB) []string {
	t.Helper()
	return testenv.FirstColumn(t, db, "SHOW BINARY LOGS")
}

// Test 4: three sweepers drain one backlog of 30,000 PENDING rows while 8
// writers keep committing small outbox transactions. Every row is published
// once (by message id) and ends SENT, and no writer's transaction fails with
// a deadlock or lock wait timeout.
func TestSweepersShareBacklogWithoutDeadlocks(t *testing.T) {
	testenv.Integration(t)
	testenv.PurgeBinlogs(t) // a long run: leave no gigabytes of binlog behind
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	const backlog = 30000
	want := insertAged(t, db, br.Exchange, "bl", "PENDING", backlog, time.Hour)
	db.WaitReplicated(t, 60*time.Second)

	// Writers, each with its own connection, as an application would.
	writerDB := testenv.Open(t, testenv.PrimaryDSN, db.Name)
	writerDB.SetMaxOpenConns(8)
	var (
		stop       atomic.Bool
		wg         sync.WaitGroup
		mu         sync.Mutex
		written    []string
		writerErrs []error
		txs        atomic.Int64
		slowest    atomic.Int64 // nanoseconds, the longest writer transaction
	)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				rows := 1 + rand.IntN(3)
				var ids []string
				began := time.Now()
				err := func() error {
					tx, err := writerDB.Begin()
					if err != nil {
						return err
					}
					defer func() { _ = tx.Rollback() }()
					for i := 0; i < rows; i++ {
						id := fmt.Sprintf("w%d-%05d-%d", w, n, i)
						if _, err := tx.Exec(`INSERT INTO producer_message (message_id, exchange, routing_key, content)
							VALUES (?, ?, 'order.created', '{}')`, id, br.Exchange); err != nil {
							return err
						}
						ids = append(ids, id)
					}
					return tx.Commit()
				}()
				if d := int64(time.Since(began)); d > slowest.Load() {
					slowest.Store(d)
				}
				mu.Lock()
				if err != nil {
					writerErrs = append(writerErrs, err)
				} else {
					written = append(written, ids...)
					txs.Add(1)
				}
				mu.Unlock()
				time.Sleep(50 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(func() { stop.Store(true); wg.Wait() })

	cfg := lifecycleConfig("sweepers", db, "interval: 100ms, grace_period: 1s, batch_size: 500")
	start := time.Now()
	for i := 0; i < 3; i++ {
		startSweeper(t, cfg)
	}
	var drained time.Duration
	deadline := time.Now().Add(120 * time.Second)
	for {
		var sent int
		if err := db.Primary.QueryRow("SELECT COUNT(*) FROM producer_message WHERE message_id LIKE 'bl-%' AND status = 'SENT'").Scan(&sent); err != nil {
			t.Fatal(err)
		}
		if sent == backlog {
			drained = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 120s: %d of %d backlog rows SENT", sent, backlog)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("3 sweepers drained %d rows in %s: %.0f rows/s (beside 8 writers: %d transactions, %d rows, slowest %s)",
		backlog, drained.Round(time.Millisecond), backlog/drained.Seconds(), txs.Load(), len(written),
		time.Duration(slowest.Load()).Round(time.Millisecond))

	for _, err := range writerErrs {
		var me *mysql.MySQLError
		if errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) {
			t.Errorf("writer transaction failed on a lock: %v", err)
		} else {
			t.Errorf("writer transaction failed: %v", err)
		}
	}
	if len(written) == 0 {
		t.Fatal("the writers committed nothing")
	}
	all := append(want, written...)
	testenv.Eventually(t, 60*time.Second, func() bool { return got.Len() >= len(all) },
		"%d of %d messages arrived", got.Len(), len(all))
	testenv.Eventually(t, 10*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(all) },
		"statuses: %v", statusCounts(t, db.Primary))
	time.Sleep(500 * time.Millisecond) // a late duplicate would show now
	counts := deliveredCounts(got)
	for _, id := range all {
		if counts[id] != 1 {
			t.Fatalf("message %s published %d times, want once", id, counts[id])
		}
	}
	if len(counts) != len(all) {
		t.Fatalf("%d distinct messages, want %d", len(counts), len(all))
	}
}

// Test 5: a row left SENDING with an old update_time (its sweeper died
// mid-publish) is reset to PENDING and then sent; a row SENDING for less
// than the zombie timeout is left alone.
func TestZombieSendingRowIsResetAndSent(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	// Committed before the relay starts (at the current position), so only
	// the sweeper can see them.
	db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content, status, create_time, update_time) VALUES
		('zombie-1', ?, 'order.created', '{}', 'SENDING', NOW(3) - INTERVAL 10 MINUTE, NOW(3) - INTERVAL 10 MINUTE),
		('busy-1', ?, 'order.created', '{}', 'SENDING', NOW(3) - INTERVAL 10 MINUTE, NOW(3))`, br.Exchange, br.Exchange)
	db.WaitReplicated(t, 10*time.Second)
	relaytest.StartRelay(t, lifecycleConfig("zombie", db, "interval: 100ms, grace_period: 1s, zombie_timeout: 1m"))

	var z rowState
	testenv.Eventually(t, 20*time.Second, func() bool { z = readRow(t, db, "zombie-1"); return z.Status == "SENT" },
		"zombie row not sent: %+v", z)
	testenv.Eventually(t, 10*time.Second, func() bool { return got.Len() >= 1 }, "zombie row not delivered")
	// version: +1 reset, +1 claim, +1 sent.
	if z.Version != 3 || !strings.Contains(z.Error, "reset to pending") {
		t.Errorf("zombie row %+v: want version 3 (reset, claim, sent) and the reset in error_msg", z)
	}
	time.Sleep(500 * time.Millisecond)
	counts := deliveredCounts(got)
	if counts["zombie-1"] != 1 || counts["busy-1"] != 0 {
		t.Fatalf("deliveries %v: want zombie-1 once and busy-1 not at all", counts)
	}
	if b := readRow(t, db, "busy-1"); b.Status != "SENDING" || b.Version != 0 {
		t.Fatalf("a row SENDING for less than the zombie timeout was touched: %+v", b)
	}
}

// Test 6: during 60 s of steady traffic with a healthy binlog path, the
// primary receives no SELECT from the relay or its sweeper. The global
// Com_select is read before and after (the test sends the primary no SELECT
// in between). The server is shared with other suites, so the relay's own
// primary connection also goes through a proxy that counts its statements:
// that count must be zero, and it tells a neighbour's SELECTs from ours.
func TestPrimarySeesNoSelectInSteadyState(t *testing.T) {
	testenv.Integration(t)
	t.Parallel() // own database, exchange, names and proxies; no server restarted (main_test.go)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	cfg := lifecycleConfig("noselect", db, "interval: 100ms, archive: {mode: delete, interval: 1s}")
	// Both of the relay's MySQL connections go through counting proxies: the
	// primary's must see no SELECT, the replica's shows the sweeper kept
	// looking there.
	counter, cfg := countStatements(t, cfg, "primary", testenv.PrimaryDSN)
	replicaCounter, cfg := countStatements(t, cfg, "source", testenv.ReplicaDSN)

	// A row the binlog path never saw: the sweeper must claim it, which
	// shows the proxy sees the sweeper's SELECTs when there is work.
	old := insertAged(t, db, br.Exchange, "old", "PENDING", 1, time.Hour)
	db.WaitReplicated(t, 10*time.Second)
	relaytest.StartRelay(t, cfg)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= 1 }, "the old row was not swept")
	if counter.Count("SELECT") == 0 {
		t.Fatal("the sweeper claimed a row but the proxy counted no SELECT: it is not on the relay's primary connection")
	}
	time.Sleep(time.Second) // the claim's settlement

	before := comSelect(t, db.Primary)
	counter.Reset()
	replicaCounter.Reset()
	start := time.Now()
	var want []string
	for i := 0; time.Since(start) < 60*time.Second; i++ {
		want = append(want, insertOrders(t, db, br.Exchange, fmt.Sprintf("steady%05d", i), 1, 2)...)
		time.Sleep(20 * time.Millisecond)
	}
	after := comSelect(t, db.Primary)
	seen := counter.Counts()
	looks := replicaCounter.Count("SELECT EXISTS")

	t.Logf("60s, %d rows: relay statements on the primary %v; sweeper pre-checks on the replica %d; global Com_select on the primary +%d",
		len(want), seen, looks, after-before)
	if seen["SELECT"] != 0 {
		t.Errorf("the relay sent the primary %d SELECTs in steady state", seen["SELECT"])
	}
	if seen["UPDATE"] == 0 {
		t.Error("the proxy counted no UPDATE: the relay's status writes did not go through it")
	}
	if looks < 100 {
		t.Errorf("only %d pre-checks on the replica in 60s: the sweeper's idle loop (every 100ms) did not run", looks)
	}
	if delta := after - before; delta != 0 && seen["SELECT"] == 0 {
		t.Logf("Com_select rose by %d from other clients of the shared server (not the relay: its connection sent none)", delta)
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= len(want)+len(old) },
		"%d of %d delivered", got.Len(), len(want)+len(old))
	testenv.Eventually(t, 10*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want)+len(old) },
		"statuses: %v", statusCounts(t, db.Primary))
}

// countStatements puts a counting proxy between the relay and the server of
// one connection section ("primary" or "source") of a config.
func countStatements(t *testing.T, cfg, section, dsn string) (*statementCounter, string) {
	t.Helper()
	h, p := testenv.HostPort(dsn)
	from := fmt.Sprintf("%s: {host: %s, port: %d,", section, h, p)
	if !strings.Contains(cfg, from) {
		t.Fatalf("config has no %q", from)
	}
	c := newStatementCounter(t, net.JoinHostPort(h, fmt.Sprint(p)))
	return c, strings.Replace(cfg, from, fmt.Sprintf("%s: {host: 127.0.0.1, port: %d,", section, c.Port()), 1)
}

func comSelect(t *testing.T, db *sql.DB) int64 {
	t.Helper()
	var name string
	var n int64
	// SHOW STATUS is counted as Com_show_status, not Com_select.
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_select'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Test 7: `binlog-relay requeue --failed --id N` brings a FAILED row back
// and it is delivered; a FAILED row it did not name stays FAILED; `status`
// shows the FAILED count and the oldest pending age.
func TestRequeueFailedRowIsDelivered(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content, status, retry_count, error_msg, create_time) VALUES
		('failed-1', ?, 'order.created', '{}', 'FAILED', 5, 'was down', NOW(3) - INTERVAL 1 HOUR),
		('failed-2', ?, 'order.created', '{}', 'FAILED', 5, 'was down', NOW(3) - INTERVAL 1 HOUR)`, br.Exchange, br.Exchange)
	yaml := lifecycleConfig("requeue", db, "interval: 100ms, grace_period: 1s")
	relaytest.StartRelay(t, yaml)
	cfgPath := relaytest.WriteConfig(t, yaml)
	bin := relaytest.Binary(t)

	out, err := exec.Command(bin, "requeue", "--config", cfgPath).CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "--failed is required") {
		t.Fatalf("requeue without --failed: exit %d, output %s", code, out)
	}
	out, err = exec.Command(bin, "status", "--config", cfgPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "failed          2") || !strings.Contains(string(out), "retry ratio") {
		t.Fatalf("status (%v):\n%s", err, out)
	}
	id := readRow(t, db, "failed-1").ID
	out, err = exec.Command(bin, "requeue", "--config", cfgPath, "--failed", "--since", "2h", "--id", fmt.Sprint(id)).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "requeued 1 FAILED rows") {
		t.Fatalf("requeue (%v): %s", err, out)
	}

	var r rowState
	testenv.Eventually(t, 20*time.Second, func() bool { r = readRow(t, db, "failed-1"); return r.Status == "SENT" },
		"requeued row not sent: %+v", r)
	testenv.Eventually(t, 10*time.Second, func() bool { return got.Len() >= 1 }, "requeued row not delivered")
	if r.RetryCount != 0 {
		t.Errorf("retry_count %d after requeue and send, want 0", r.RetryCount)
	}
	counts := deliveredCounts(got)
	if counts["failed-1"] != 1 || counts["failed-2"] != 0 {
		t.Fatalf("deliveries %v: want failed-1 once, failed-2 never", counts)
	}
	if s := readRow(t, db, "failed-2").Status; s != "FAILED" {
		t.Fatalf("failed-2 is %s; requeue --id must leave other rows FAILED", s)
	}
}

// Rows the application re-queues are the binlog path's to publish, and
// the sweeper (on, with a short grace period) leaves them alone for the
// grace period after the re-queue, however old the row: 500 SENT rows,
// created an hour ago (half of them after two retries, with a
// next_retry_time long past), put back to PENDING by an UPDATE, an upsert
// and a REPLACE that keeps create_time. Each arrives once, and neither path
// counts a row already sent. Run it with -count=5: the sweeper taking a row
// while the binlog path publishes it is a race.
func TestRequeuedRowsAreNotSweptToo(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	const n = 500
	ids := insertAged(t, db, br.Exchange, "rqs", "SENT", n, time.Hour)
	db.Exec(t, "UPDATE producer_message SET retry_count = 2, next_retry_time = NOW(3) - INTERVAL 50 MINUTE WHERE id % 2 = 0")
	r := relaytest.StartRelay(t, lifecycleConfig("rqsweep", db, "interval: 50ms, grace_period: 3s"))

	in := func(ids []string) string { return "'" + strings.Join(ids, "','") + "'" }
	const perStmt = 50
	for start := 0; start < n; start += perStmt {
		batch := ids[start : start+perStmt]
		switch start / perStmt % 3 {
		case 0: // the application's own re-queue
			db.Exec(t, "UPDATE producer_message SET status = 'PENDING' WHERE message_id IN ("+in(batch)+")")
		case 1: // an upsert over the existing message id
			var b strings.Builder
			for i, id := range batch {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, "('%s', '%s', 'order.created', '{\"upsert\":1}')", id, br.Exchange)
			}
			db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES "+b.String()+
				" ON DUPLICATE KEY UPDATE status = 'PENDING', content = '{\"upsert\":1}'")
		case 2: // the whole row written again, as the application had it
			db.Exec(t, "REPLACE INTO producer_message (id, message_id, exchange, routing_key, content, retry_count, next_retry_time, create_time) "+
				"SELECT id, message_id, exchange, routing_key, '{\"replace\":1}', retry_count, next_retry_time, create_time FROM "+
				"(SELECT * FROM producer_message WHERE message_id IN ("+in(batch)+")) AS old")
		}
	}

	waitReceived(t, got, n, 60*time.Second)
	testenv.WaitFor(t, 30*time.Second, "every re-queued row SENT", func() (bool, string) {
		c := statusCounts(t, db.Primary)
		return c["SENT"] == n, fmt.Sprint(c)
	})
	waitQuiet(t, got, 2*time.Second, 30*time.Second)
	fams := gatherApp(t, r.App)
	already, _ := value(fams, "binlog_relay_published_already_sent_total")
	claimed, _ := value(fams, "binlog_relay_sweeper_claims_total")
	binlogPath := r.App.Relay().Stats.AlreadySent.Load()
	var twice []string
	for id, c := range deliveredCounts(got) {
		if c != 1 {
			twice = append(twice, fmt.Sprintf("%s x%d", id, c))
		}
	}
	t.Logf("%d deliveries of %d rows; the sweeper claimed %v of them", got.Len(), n, claimed)
	if len(twice) > 0 || already != 0 {
		t.Fatalf("%d rows delivered more than once (%v); published_already_sent_total %v (binlog path %d, sweeper %v)",
			len(twice), twice[:min(len(twice), 5)], already, binlogPath, already-float64(binlogPath))
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// Test 8: archive moves (or deletes) SENT rows older than the retention, in
// batches, and nothing else: recent SENT rows and old FAILED rows stay.
func TestArchiveOnlyOldSentRows(t *testing.T) {
	testenv.Integration(t)
	for _, mode := range []string{"move", "delete"} {
		t.Run(mode, func(t *testing.T) {
			db := testenv.NewDB(t, "schema/producer_message.sql", "schema/producer_message_archive.sql")
			const week = 7 * 24 * time.Hour
			oldSent := insertAged(t, db, "ex", "oldsent", "SENT", 2500, week+24*time.Hour)
			insertAged(t, db, "ex", "newsent", "SENT", 20, week-24*time.Hour)
			insertAged(t, db, "ex", "oldfailed", "FAILED", 20, week+24*time.Hour)
			db.WaitReplicated(t, 20*time.Second)

			startSweeper(t, lifecycleConfig("archive", db, "interval: 100ms, archive: {mode: "+mode+", retention: 168h, batch_size: 1000, pause: 50ms, interval: 200ms}"))
			count := func(q string) int { return db.Count(t, q) }
			testenv.Eventually(t, 30*time.Second, func() bool {
				return count("SELECT COUNT(*) FROM producer_message WHERE message_id LIKE 'oldsent-%'") == 0
			}, "old SENT rows left: %d", count("SELECT COUNT(*) FROM producer_message WHERE message_id LIKE 'oldsent-%'"))

			if n := count("SELECT COUNT(*) FROM producer_message WHERE message_id LIKE 'newsent-%' AND status = 'SENT'"); n != 20 {
				t.Errorf("%d of 20 recent SENT rows left", n)
			}
			if n := count("SELECT COUNT(*) FROM producer_message WHERE message_id LIKE 'oldfailed-%' AND status = 'FAILED'"); n != 20 {
				t.Errorf("%d of 20 old FAILED rows left", n)
			}
			archived := count("SELECT COUNT(*) FROM producer_message_archive")
			switch mode {
			case "move":
				if archived != len(oldSent) {
					t.Fatalf("archive holds %d rows, want %d", archived, len(oldSent))
				}
				same := count(`SELECT COUNT(*) FROM producer_message_archive
					WHERE message_id LIKE 'oldsent-%' AND status = 'SENT' AND content LIKE '{"n":%'`)
				if same != len(oldSent) {
					t.Fatalf("%d archived rows are the old SENT rows with their content, want %d", same, len(oldSent))
				}
			case "delete":
				if archived != 0 {
					t.Fatalf("delete mode wrote %d rows to the archive table", archived)
				}
			}
		})
	}
}

// statementCounter is a loopback proxy to a MySQL server that counts the
// statements its clients send, by first keyword (COM_QUERY and
// COM_STMT_PREPARE packets; the relay's DSN interpolates, so every statement
// is a COM_QUERY), and the commands by kind, as the bench's wire proxy does
// (bench/wire.go).
type statementCounter struct {
	proxy  *faultproxy.Proxy
	mu     sync.Mutex
	counts map[string]int
	// queries and executes are the COM_QUERY and COM_STMT_EXECUTE packets.
	queries, executes int
}

func newStatementCounter(t *testing.T, target string) *statementCounter {
	t.Helper()
	c := &statementCounter{counts: map[string]int{}}
	p, err := faultproxy.ListenTap(target, faultproxy.CommandTap(64, c.note))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	c.proxy = p
	return c
}

func (c *statementCounter) Port() int { return c.proxy.Port() }

func (c *statementCounter) Count(keyword string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[keyword]
}

func (c *statementCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// Commands is how many queries (COM_QUERY) and prepared statement
// executions (COM_STMT_EXECUTE) passed, and how many connections clients
// opened through the proxy.
func (c *statementCounter) Commands() (queries, executes, conns int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queries, c.executes, c.proxy.Accepted()
}

func (c *statementCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.counts)
	c.queries, c.executes = 0, 0
}

// note counts a COM_QUERY or COM_STMT_PREPARE by its first keyword, and
// the COM_QUERY and COM_STMT_EXECUTE packets.
func (c *statementCounter) note(payload []byte) {
	switch payload[0] {
	case 0x03:
		c.mu.Lock()
		c.queries++
		c.mu.Unlock()
	case 0x17:
		c.mu.Lock()
		c.executes++
		c.mu.Unlock()
	}
	if len(payload) < 2 || (payload[0] != 0x03 && payload[0] != 0x16) {
		return
	}
	text := string(payload[1:])
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts[strings.ToUpper(fields[0])]++
	// The sweeper's pre-checks are the only EXISTS probes.
	if strings.HasPrefix(text, "SELECT EXISTS(") {
		c.counts["SELECT EXISTS"]++
	}
}
