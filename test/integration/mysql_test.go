package integration

// What only MySQL has, each on the stack's MySQL 9.7 (RELAY_TEST_FLAVOR=
// mysql-9.7; on a MariaDB flavour each says why it does not apply): tagged
// GTIDs, binlog transaction compression, local writes on the replica (a
// second server_uuid in the set), caching_sha2_password without TLS, the
// multi-threaded applier's commit order, and the statements MySQL 9 removed.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/command"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

func onlyMySQL(t *testing.T) {
	t.Helper()
	testenv.Integration(t)
	testenv.Only(t, true, "a MySQL feature; MariaDB has no such thing")
}

// insertOn writes txs transactions of perTx rows on one connection of the
// primary after the session statements given (a GTID tag, compression),
// and returns the message ids in commit order.
func insertOn(t *testing.T, db *sql.DB, session []string, exchange, prefix string, txs, perTx int) []string {
	t.Helper()
	var ids []string
	inSession(t, db, session, func(conn *sql.Conn) {
		for i := 0; i < txs; i++ {
			stmt, batch := orderInsert(exchange, prefix, i, perTx)
			ids = append(ids, batch...)
			if _, err := conn.ExecContext(context.Background(), stmt); err != nil { // autocommit: one transaction
				t.Fatalf("insert: %v", err)
			}
		}
	})
	return ids
}

// inSession runs f on one connection of db after the session statements,
// and then drops that connection (discard).
func inSession(t *testing.T, db *sql.DB, session []string, f func(conn *sql.Conn)) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range session {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	f(conn)
	discard(conn)
}

// discard makes the pool drop conn rather than hand its session settings
// (a GTID tag, compression) to the next user.
func discard(conn *sql.Conn) { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }

// A tagged GTID (MySQL 8.3+: SET gtid_next='AUTOMATIC:tag') is kept in the
// checkpoint as the server writes it, and a restart resumes from it:
// every row arrives once, in order, and status shows the tag.
func TestMySQLTaggedGTIDsInTheCheckpoint(t *testing.T) {
	onlyMySQL(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("tagged")
	cfg := relaytest.RelayConfig(name, relaytest.SeedTable(db.Name), noSweeper)
	r := relaytest.StartRelay(t, cfg)
	tag := []string{"SET gtid_next = 'AUTOMATIC:orders'"}

	want := insertOn(t, db.Primary, tag, br.Exchange, "tag1", 50, 20)
	waitDeliveredOnceInOrder(t, got, want, 60*time.Second)
	key := "binlog-relay:" + name + ":checkpoint"
	waitCheckpointCovers(t, key, primaryGTID(t, db))
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	cp, err := loadCheckpoint(t, key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cp.GTIDSet, ":orders:") {
		t.Fatalf("checkpoint %s lacks the tagged GTIDs (:orders:N)", cp.GTIDSet)
	}
	t.Logf("checkpoint with a tag: %s", cp.GTIDSet)

	// Rows written while it is down, tagged and not, then a restart.
	want = append(want, insertOn(t, db.Primary, tag, br.Exchange, "tag2", 20, 20)...)
	want = append(want, insertOrders(t, db, br.Exchange, "untagged", 20, 20)...)
	r2 := relaytest.StartRelay(t, cfg)
	waitDeliveredOnceInOrder(t, got, want, 60*time.Second)
	var status strings.Builder
	if err := command.Status(context.Background(), r2.App.Env(), &status); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status.String(), ":orders:") {
		t.Errorf("status does not show the tagged GTID:\n%s", status.String())
	}
}

// The relay's source replica compresses what it logs
// (binlog_transaction_compression=ON there: a MySQL replica re-logs what it
// applies in its own setting, whatever the primary did), so every
// transaction reaches the relay as one ZSTD Transaction_payload event,
// which it decodes: every row arrives once, in order, and check says the
// setting is on. On the switch topology, whose source is switch2.
func TestMySQLCompressedTransactions(t *testing.T) {
	onlyMySQL(t)
	tp := testenv.NewTopology(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	setCompression := func(v string) {
		tp.Exec(t, "switch2", "STOP REPLICA SQL_THREAD")
		tp.Exec(t, "switch2", "SET GLOBAL binlog_transaction_compression = "+v)
		tp.Exec(t, "switch2", "START REPLICA SQL_THREAD")
	}
	setCompression("ON")
	t.Cleanup(func() { setCompression("OFF") })
	yaml := topologyYAML(tp, testenv.UniqueName("zstd"), fmt.Sprintf("  - {preset: producer-message, schema: %s}\n", tp.DB),
		map[string]string{"sweeper": "{enabled: false}"})
	if !findLine(runCheck(t, yaml), "INFO", "binlog_transaction_compression is ON") {
		t.Errorf("check does not report the source's compression")
	}
	relaytest.StartRelay(t, yaml)
	source := tp.Servers["switch2"]
	file, pos := binlogAt(t, source)

	want := insertOn(t, tp.On(t, "switch1"), nil, br.Exchange, "zstd", 40, 50)
	waitDeliveredOnceInOrder(t, got, want, 60*time.Second)

	// The source did log them compressed: the test would prove nothing otherwise.
	tp.WaitReplicated(t, "switch2", 30*time.Second)
	types := testenv.ColumnOf(t, source, fmt.Sprintf("SHOW BINLOG EVENTS IN '%s' FROM %d LIMIT 400", file, pos), "Event_type")
	n := 0
	for _, ty := range types {
		if ty == "Transaction_payload" {
			n++
		}
	}
	if n < 40 {
		t.Fatalf("%d Transaction_payload events in the source's binlog after %s:%d, want the 40 transactions (events: %v)", n, file, pos, types[:min(len(types), 20)])
	}
	t.Logf("%d compressed transactions among the first %d events", n, len(types))
}

// binlogAt is where db writes its binlog now.
func binlogAt(t *testing.T, db *sql.DB) (string, int64) {
	t.Helper()
	var file string
	var pos int64
	row := testenv.ColumnOf(t, db, testenv.Current.BinlogStatusSQL(), "File")
	p := testenv.ColumnOf(t, db, testenv.Current.BinlogStatusSQL(), "Position")
	if len(row) != 1 || len(p) != 1 {
		t.Fatalf("%s: no binlog file", testenv.Current.BinlogStatusSQL())
	}
	file = row[0]
	if _, err := fmt.Sscan(p[0], &pos); err != nil {
		t.Fatal(err)
	}
	return file, pos
}

// A statement logged on the replica itself (an errant transaction: an
// ANALYZE TABLE by a DBA) puts the replica's server_uuid into its
// gtid_executed beside the primary's. The relay's checkpoint keeps both
// sets, a restart resumes from it, and check passes. The primary then
// logs an empty transaction with that GTID, the usual repair, so that every
// server of the stack holds it (a failover to replica2 finds it there).
func TestMySQLLocalWritesOnTheReplica(t *testing.T) {
	onlyMySQL(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("errant")
	cfg := relaytest.RelayConfig(name, relaytest.SeedTable(db.Name), noSweeper)
	r := relaytest.StartRelay(t, cfg)
	replica := testenv.Open(t, testenv.ReplicaDSN, "")
	uuid := queryString(t, replica, "SELECT @@server_uuid")

	first := insertOrders(t, db, br.Exchange, "e1", 20, 20)
	if _, err := replica.Exec("ANALYZE TABLE `" + db.Name + "`.producer_message"); err != nil {
		t.Fatal(err)
	}
	executed := queryString(t, replica, "SELECT @@gtid_executed")
	local := localGTID(t, executed, uuid)
	t.Cleanup(func() { repairErrant(t, db, local) })
	first = append(first, insertOrders(t, db, br.Exchange, "e2", 20, 20)...)
	waitDeliveredOnceInOrder(t, got, first, 60*time.Second)
	key := "binlog-relay:" + name + ":checkpoint"
	waitCheckpointCovers(t, key, local)
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	cp, err := loadCheckpoint(t, key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cp.GTIDSet, uuid) {
		t.Fatalf("checkpoint %s lacks the replica's own GTIDs (%s)", cp.GTIDSet, uuid)
	}
	t.Logf("local write %s; checkpoint %s", local, cp.GTIDSet)

	second := insertOrders(t, db, br.Exchange, "e3", 20, 20)
	r2 := relaytest.StartRelay(t, cfg)
	for _, p := range r2.App.Check(context.Background()) {
		if p.Severity == "ERROR" {
			t.Errorf("check after the restart: %s", p)
		}
	}
	waitDeliveredOnceInOrder(t, got, append(first, second...), 60*time.Second)
}

// localGTID is the last GTID of uuid in a MySQL GTID set ("uuid:1-5" gives
// "uuid:5").
func localGTID(t *testing.T, set, uuid string) string {
	t.Helper()
	for _, part := range strings.Split(strings.ReplaceAll(set, "\n", ""), ",") {
		part = strings.TrimSpace(part)
		if !strings.HasPrefix(part, uuid+":") {
			continue
		}
		ivs := strings.Split(part, ":")
		last := ivs[len(ivs)-1]
		if i := strings.LastIndex(last, "-"); i >= 0 {
			last = last[i+1:]
		}
		return uuid + ":" + last
	}
	t.Fatalf("no GTID of %s in %s", uuid, set)
	return ""
}

// repairErrant logs an empty transaction with each GTID of the replica's own
// on the primary, so that every server has it.
func repairErrant(t *testing.T, db *testenv.DB, gtid string) {
	ctx := context.Background()
	conn, err := db.Primary.Conn(ctx)
	if err != nil {
		t.Errorf("repairing the errant GTID %s: %v", gtid, err)
		return
	}
	defer conn.Close()
	uuid, last, _ := strings.Cut(gtid, ":")
	var n int
	if _, err := fmt.Sscan(last, &n); err != nil {
		t.Errorf("repairing the errant GTID %s: %v", gtid, err)
		return
	}
	for i := 1; i <= n; i++ {
		for _, q := range []string{fmt.Sprintf("SET gtid_next = '%s:%d'", uuid, i), "BEGIN", "COMMIT", "SET gtid_next = 'AUTOMATIC'"} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Errorf("repairing the errant GTID %s:%d: %s: %v", uuid, i, q, err)
				return
			}
		}
	}
	discard(conn)
	db.WaitReplicatedOn(t, testenv.Replica2DSN, 30*time.Second)
}

// A relay user with caching_sha2_password (MySQL's default) and no TLS:
// the relay's connections fetch the server's RSA public key to send the
// password, stream and mark rows; a wrong password is refused with the
// server's own words and never shown.
func TestMySQLCachingSha2WithoutTLS(t *testing.T) {
	onlyMySQL(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	user, pw := testenv.UniqueName("sha2"), "pw-"+testenv.UniqueName("x")
	db.Exec(t, fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY '%s'", user, pw))
	t.Cleanup(func() { _, _ = db.Primary.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'127.0.0.1'", user)) })
	db.Exec(t, fmt.Sprintf("GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '%s'@'127.0.0.1'", user))
	db.Exec(t, fmt.Sprintf("GRANT SELECT, UPDATE ON `%s`.* TO '%s'@'127.0.0.1'", db.Name, user))
	db.WaitReplicated(t, 30*time.Second)
	// FLUSH LOCAL PRIVILEGES empties the servers' caches of hashes, so the first
	// login is a full authentication: the one that needs the key.
	for _, dsn := range []string{testenv.PrimaryDSN, testenv.ReplicaDSN} {
		if _, err := testenv.Open(t, dsn, "").Exec("FLUSH LOCAL PRIVILEGES"); err != nil { // LOCAL: no GTID of the replica's own
			t.Fatal(err)
		}
	}
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	ph, pp := testenv.HostPort(testenv.PrimaryDSN)
	yaml := opsYAML(testenv.UniqueName("sha2"), relaytest.SeedTable(db.Name), map[string]string{
		"source":  fmt.Sprintf("{host: %s, port: %d, user: %s, password: %q}", sh, sp, user, pw),
		"primary": fmt.Sprintf("{host: %s, port: %d, user: %s, password: %q}", ph, pp, user, pw),
	})
	for _, l := range runCheck(t, yaml) {
		if strings.HasPrefix(l, "ERROR") {
			t.Errorf("check: %s", l)
		}
	}
	relaytest.StartRelay(t, yaml)
	want := insertOrders(t, db, br.Exchange, "sha2", 10, 10)
	waitDeliveredOnceInOrder(t, got, want, 30*time.Second)
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"marked through the caching_sha2 user: %v", statusCounts(t, db.Primary))

	bad := strings.ReplaceAll(yaml, fmt.Sprintf("%q", pw), `"wrong-password"`)
	lines := runCheck(t, bad)
	if !findLine(lines, "ERROR", "Access denied for user '"+user+"'") {
		t.Fatalf("check with a wrong password does not say access was denied:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.Contains(l, "wrong-password") || strings.Contains(l, pw) {
			t.Fatalf("a check line shows a password: %s", l)
		}
	}
}

// A multi-threaded applier that may commit out of the primary's order
// (replica_parallel_workers > 1, replica_preserve_commit_order OFF) is
// refused by check, naming the fix; with the order preserved (MySQL's
// default) check says so and passes.
func TestMySQLParallelApplierCommitOrder(t *testing.T) {
	onlyMySQL(t)
	tp := testenv.NewTopology(t, "schema/producer_message.sql")
	yaml := topologyYAML(tp, testenv.UniqueName("mta"), fmt.Sprintf("  - {preset: producer-message, schema: %s}\n", tp.DB), nil)
	setApplier := func(workers int, preserve string) {
		tp.Exec(t, "switch2", "STOP REPLICA SQL_THREAD")
		tp.Exec(t, "switch2", fmt.Sprintf("SET GLOBAL replica_parallel_workers = %d", workers))
		tp.Exec(t, "switch2", "SET GLOBAL replica_preserve_commit_order = "+preserve)
		tp.Exec(t, "switch2", "START REPLICA SQL_THREAD")
	}
	t.Cleanup(func() { setApplier(4, "ON") })

	setApplier(4, "ON")
	lines := runCheck(t, yaml)
	if !findLine(lines, "INFO", "replica_parallel_workers=4", "commits in the primary's order") {
		t.Errorf("check does not report the ordered multi-threaded applier:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.HasPrefix(l, "ERROR") {
			t.Errorf("check with the order preserved: %s", l)
		}
	}

	setApplier(4, "OFF")
	lines = runCheck(t, yaml)
	if !findLine(lines, "ERROR", "replica_preserve_commit_order OFF", "out of commit order", "replica_preserve_commit_order=ON") {
		t.Fatalf("check does not refuse the unordered applier:\n%s", strings.Join(lines, "\n"))
	}

	setApplier(1, "OFF")
	for _, l := range runCheck(t, yaml) {
		if strings.Contains(l, "replica_parallel_workers") {
			t.Errorf("check speaks of the applier with one worker: %s", l)
		}
	}
}

// MySQL 9 removed SHOW MASTER STATUS, SHOW SLAVE STATUS, SHOW SLAVE HOSTS,
// START/STOP SLAVE and RESET MASTER: the relay sends the source none of
// them (a try that fails and falls back would show here too) while it
// checks, starts, streams and reports its status.
func TestMySQLRemovedStatementsNeverSent(t *testing.T) {
	onlyMySQL(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	var mu sync.Mutex
	var sent []string
	px, err := faultproxy.ListenTap(testenv.Addr(testenv.ReplicaDSN), faultproxy.CommandTap(200, func(p []byte) {
		if p[0] == 0x03 || p[0] == 0x16 { // COM_QUERY, COM_STMT_PREPARE
			mu.Lock()
			sent = append(sent, string(p[1:]))
			mu.Unlock()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	yaml := opsYAML(testenv.UniqueName("removed"), relaytest.SeedTable(db.Name), map[string]string{
		"source": fmt.Sprintf("{host: 127.0.0.1, port: %d, user: root, server_id: %d}", px.Port(), 500000+time.Now().UnixNano()%100000),
		"http":   `{addr: "127.0.0.1:0", ready_max_lag: 5s}`,
	})
	runCheck(t, yaml)
	r := relaytest.StartRelay(t, yaml)
	want := insertOrders(t, db, br.Exchange, "rm", 10, 10)
	waitDeliveredOnceInOrder(t, got, want, 30*time.Second)
	var status strings.Builder
	if err := command.Status(context.Background(), r.App.Env(), &status); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool { code, _, _ := get(httpAddr(t, r.App) + "/readyz"); return code == 200 },
		"the relay is not ready")
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}

	mu.Lock()
	defer mu.Unlock()
	removed := []string{"SHOW MASTER STATUS", "SHOW SLAVE STATUS", "SHOW SLAVE HOSTS", "START SLAVE", "STOP SLAVE", "RESET MASTER", "RESET SLAVE", "CHANGE MASTER"}
	seen := map[string]bool{}
	for _, q := range sent {
		u := strings.ToUpper(strings.Join(strings.Fields(q), " "))
		for _, r := range removed {
			if strings.Contains(u, r) {
				t.Errorf("the relay sent MySQL 9 %q, which it removed", q)
			}
		}
		for _, w := range []string{"SHOW BINARY LOG STATUS", "SHOW REPLICA STATUS"} {
			if strings.Contains(u, w) {
				seen[w] = true
			}
		}
	}
	if !seen["SHOW BINARY LOG STATUS"] || !seen["SHOW REPLICA STATUS"] {
		t.Fatalf("the tap saw %d statements, without SHOW BINARY LOG STATUS or SHOW REPLICA STATUS (%v): it proves nothing", len(sent), seen)
	}
	t.Logf("%d statements to the source, none removed in MySQL 9", len(sent))
}

// The delay behind the primary is measured with tagged GTIDs too: while
// the source's SQL thread is stopped and the primary writes tagged
// transactions, the delay grows; once the replica applies them and the
// relay has streamed them, the primary's tagged set is covered by the
// relay's position and the delay is 0 again.
func TestMySQLTaggedGTIDsInTheDelay(t *testing.T) {
	onlyMySQL(t)
	tp := testenv.NewTopology(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	yaml := topologyYAML(tp, testenv.UniqueName("tagdelay"), fmt.Sprintf("  - {preset: producer-message, schema: %s}\n", tp.DB), map[string]string{
		"http":    `{addr: "127.0.0.1:0", ready_max_lag: 30s}`,
		"sweeper": "{enabled: false}",
	})
	r := relaytest.StartRelay(t, yaml)
	base := httpAddr(t, r.App)
	delay := func() (float64, bool) {
		fams, _ := scrape(t, base)
		return value(fams, "binlog_relay_source_delay_seconds")
	}
	tag := []string{"SET gtid_next = 'AUTOMATIC:delay'"}
	want := insertOn(t, tp.On(t, "switch1"), tag, br.Exchange, "d1", 5, 10)
	waitDeliveredOnceInOrder(t, got, want, 30*time.Second)

	tp.Exec(t, "switch2", "STOP REPLICA SQL_THREAD")
	t.Cleanup(func() { _, _ = tp.Servers["switch2"].Exec("START REPLICA SQL_THREAD") })
	want = append(want, insertOn(t, tp.On(t, "switch1"), tag, br.Exchange, "d2", 5, 10)...)
	testenv.WaitFor(t, 15*time.Second, "the delay to grow behind tagged transactions", func() (bool, string) {
		v, ok := delay()
		return ok && v >= 2, fmt.Sprintf("delay %v (present %v)", v, ok)
	})
	tp.Exec(t, "switch2", "START REPLICA SQL_THREAD")
	waitDeliveredOnceInOrder(t, got, want, 30*time.Second)
	testenv.WaitFor(t, 20*time.Second, "the delay back to 0 once the tagged set is streamed", func() (bool, string) {
		v, ok := delay()
		return ok && v == 0, fmt.Sprintf("delay %v (present %v)", v, ok)
	})
	var status strings.Builder
	if err := command.Status(context.Background(), r.App.Env(), &status); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(status.String(), ":delay:") {
		t.Errorf("status does not show the tagged position:\n%s", status.String())
	}
}

// A checkpoint holding tagged GTIDs (MySQL 8.3+, uuid:tag:N) goes through
// the gap check like any other: the position purged from the source is
// refused without --accept-gap, naming what would be lost; with it the
// relay starts at the current position, and the tagged rows written after
// arrive while those in the purged range do not.
func TestMySQLTaggedGTIDsInTheGapCheck(t *testing.T) {
	onlyMySQL(t)
	o, want := startTopologyOutbox(t, "taggap", "first", 20)
	tp := o.tp
	ctx := context.Background()
	tagged := func(prefix string, n int) (ids []string) {
		t.Helper()
		inSession(t, tp.On(t, "switch1"), []string{"SET gtid_next = 'AUTOMATIC:orders'"}, func(conn *sql.Conn) {
			ids = insertOutbox(t, conn, o.br.Exchange, prefix, n, 10)
		})
		return ids
	}
	want = append(want, tagged("tagged", 30)...)
	waitAllDistinct(t, o.got, want, 30*time.Second)
	if err := o.r.Stop(); err != nil {
		t.Fatal(err)
	}
	cp, err := o.r.App.Store.Load(ctx)
	if err != nil || !strings.Contains(cp.GTIDSet, ":orders:") {
		t.Fatalf("checkpoint %+v (%v): want tagged GTIDs (:orders:N) in it", cp, err)
	}

	lost := tagged("lost", 30)
	tp.WaitReplicated(t, "switch2", 30*time.Second)
	purgeAllButCurrent(t, tp, "switch2")

	_, _, run := startApp(t, o.yaml, false)
	err = refusal(t, run, 60*time.Second, "run did not refuse the purged tagged position")
	for _, w := range []string{"purged", tp.DB + ".outbox", "--accept-gap", ":orders:"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("run without --accept-gap: %v (want it to say %q)", err, w)
		}
	}
	t.Logf("refused: %v", err)

	a, _, run2 := startApp(t, o.yaml, true)
	waitRunning(t, a, run2)
	after := tagged("after", 30)
	waitAllDistinct(t, o.got, append(want, after...), 30*time.Second)
	for _, m := range o.got.All() {
		for _, id := range lost {
			if m.MessageID == id {
				t.Fatalf("%s was in the purged range, yet delivered", id)
			}
		}
	}
	cp, err = a.Store.Load(ctx)
	if err != nil || !strings.Contains(cp.GTIDSet, ":orders:") {
		t.Fatalf("checkpoint after the gap %+v (%v): want the tagged GTIDs kept", cp, err)
	}
}
