package integration

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/binlog-relay/binlog-relay/internal/faultproxy"
	"github.com/binlog-relay/binlog-relay/internal/sourceinfo"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
	"github.com/binlog-relay/binlog-relay/pkg/checkpoint"
)

// noSweeper turns the sweeper off so every delivery comes from the binlog
// path: a duplicate or a missing row is the reader's.
const noSweeper = "sweeper: {enabled: false}\n"

// viaProxy points a relay config's source at a proxy in front of the replica.
func viaProxy(t *testing.T, yaml string, px *faultproxy.Proxy) string {
	t.Helper()
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	from := fmt.Sprintf("source: {host: %s, port: %d,", sh, sp)
	if !strings.Contains(yaml, from) {
		t.Fatalf("relay config has no %q", from)
	}
	return strings.Replace(yaml, from, fmt.Sprintf("source: {host: 127.0.0.1, port: %d,", px.Port()), 1)
}

// Cuts of the source connection inside one 50,000-row transaction:
// each reconnect reads the transaction again from its start and skips the
// rows already emitted, however many reconnects there were. Every row
// arrives once, in order.
func TestTwoCutsInsideOneLargeTransaction(t *testing.T) {
	testenv.Integration(t)
	testenv.LockHeavy(t)
	testenv.PurgeBinlogs(t) // a long run: leave no gigabytes of binlog behind
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	px := testenv.Proxy(t, testenv.Addr(testenv.ReplicaDSN))
	relaytest.StartRelay(t, viaProxy(t, relaytest.RelayConfig(testenv.UniqueName("twocuts"), relaytest.SeedTable(db.Name), noSweeper), px))

	const rows, perStmt = 50_000, 1_000
	var want []string
	tx, err := db.Primary.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < rows/perStmt; i++ {
		stmt, ids := orderInsert(br.Exchange, "big", i, perStmt)
		if _, err := tx.Exec(stmt); err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	cut := func(after int) {
		t.Helper()
		testenv.Eventually(t, 120*time.Second, func() bool { return got.Len() >= after }, "received %d of %d before the cut", got.Len(), after)
		px.Cut()
		if n := got.Len(); n >= rows {
			t.Fatalf("the cut came after all %d rows arrived: it proves nothing", n)
		}
		testenv.Eventually(t, 10*time.Second, func() bool { return px.Live() == 0 }, "connections still open after the cut")
		px.Restore()
		testenv.Eventually(t, 30*time.Second, func() bool { return px.Live() > 0 }, "the relay did not reconnect")
		t.Logf("cut at %d rows received", got.Len())
	}
	cut(5_000)
	// Again as soon as the stream is back: the reader is likely still
	// reading past the rows it skips, where a skip count taken from the
	// rows read on the last connection would fall short.
	cut(0)
	cut(25_000)
	waitDeliveredOnceInOrder(t, got, want, 180*time.Second)
	testenv.Eventually(t, 60*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == rows },
		"statuses on the primary: %v", statusCounts(t, db.Primary))
}

// XA: rows of a branch are published only once XA COMMIT is logged; an
// XA ROLLBACK after XA PREPARE publishes nothing.
func TestXACommitAndRollback(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("xa"), relaytest.SeedTable(db.Name), noSweeper))

	ctx := context.Background()
	xidC, xidR := testenv.UniqueName("xc"), testenv.UniqueName("xr")
	// MariaDB keeps a prepared branch past its connection (10.5+), holding
	// its locks: whatever the test leaves prepared is rolled back before the
	// database is dropped.
	t.Cleanup(func() {
		for _, x := range []string{xidC, xidR} {
			_, _ = db.Primary.Exec("XA ROLLBACK '" + x + "'")
		}
	})
	// Each branch in a session of its own, closed after XA PREPARE: the
	// usual shape of XA, where a transaction manager commits later.
	prepare := func(xid, prefix string, n int) {
		t.Helper()
		conn := testenv.Open(t, testenv.PrimaryDSN, db.Name)
		conn.SetMaxOpenConns(1)
		stmt, _ := orderInsert(br.Exchange, prefix, 0, n)
		for _, q := range []string{"XA START '" + xid + "'", stmt, "XA END '" + xid + "'", "XA PREPARE '" + xid + "'"} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		// Disconnecting detaches the prepared branch, so another session
		// can commit or roll it back.
		_ = conn.Close()
	}
	exec := func(q string) {
		t.Helper()
		if _, err := db.Primary.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	prepare(xidC, "xa-commit", 3)
	prepare(xidR, "xa-rollback", 4)
	// A plain transaction after both prepares: once it is delivered, the
	// relay has read past both XA PREPAREs.
	fence := insertOrders(t, db, br.Exchange, "fence1", 1, 1)
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= 1 }, "the row after the prepares did not arrive")
	if msgs := got.All(); len(msgs) != 1 || msgs[0].MessageID != fence[0] {
		t.Fatalf("after XA PREPARE: received %v, want only %s (prepared rows are not published)", ids(msgs), fence[0])
	}
	exec("XA ROLLBACK '" + xidR + "'")
	exec("XA COMMIT '" + xidC + "'")
	fence2 := insertOrders(t, db, br.Exchange, "fence2", 1, 1)
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= 5 }, "received %v", ids(got.All()))
	_, commitIDs := orderInsert(br.Exchange, "xa-commit", 0, 3)
	wantIDs := append(append(append([]string{}, fence...), commitIDs...), fence2...)
	if g := ids(got.All()); strings.Join(g, " ") != strings.Join(wantIDs, " ") {
		t.Fatalf("received %v, want %v (the committed branch, nothing of the rolled-back one)", g, wantIDs)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == 5 },
		"statuses on the primary: %v", statusCounts(t, db.Primary))
}

func ids(msgs []testenv.Delivery) []string {
	out := make([]string, 0, len(msgs))
	for _, m := range msgs {
		out = append(out, m.MessageID)
	}
	return out
}

// gtidSeq is the sequence number domain holds in a MariaDB GTID position,
// and the server id that wrote it.
func gtidSeq(pos string, domain uint32) (seq uint64, server uint32, ok bool) {
	for _, g := range strings.Split(pos, ",") {
		p := strings.Split(strings.TrimSpace(g), "-")
		if len(p) != 3 || p[0] != strconv.FormatUint(uint64(domain), 10) {
			continue
		}
		s, _ := strconv.ParseUint(p[2], 10, 64)
		sid, _ := strconv.ParseUint(p[1], 10, 32)
		return s, uint32(sid), true
	}
	return 0, 0, false
}

func queryString(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query string) string {
	t.Helper()
	var s string
	if err := q.QueryRowContext(context.Background(), query).Scan(&s); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return s
}

// replicaHealthy waits until the replica applies a fresh primary write, and
// fails if its SQL thread stopped with an error.
func replicaHealthy(t *testing.T, db *testenv.DB) {
	t.Helper()
	replica := testenv.Open(t, testenv.ReplicaDSN, "")
	db.WaitReplicated(t, 30*time.Second)
	status, err := testenv.Current.ReplicaStatus(context.Background(), replica)
	if err != nil {
		t.Fatal(err)
	}
	if len(status) == 0 {
		t.Fatal("the replica has no replication configured")
	}
	if status["Slave_IO_Running"] != "Yes" || status["Slave_SQL_Running"] != "Yes" || status["Last_SQL_Errno"] != "0" {
		t.Fatalf("the replica's replication is broken: IO %s, SQL %s, last SQL error %s %s",
			status["Slave_IO_Running"], status["Slave_SQL_Running"], status["Last_SQL_Errno"], status["Last_SQL_Error"])
	}
}

// xaDomain is the gtid_domain_id the local-write test gives its replica
// session. MariaDB keeps a domain in gtid_binlog_state for good, so the test
// always uses this one and then has the primary log a later GTID in it,
// which every replica applies: no server is left with a domain the others
// lack (a failover between replicas compares positions domain by domain).
const localDomain = 77

// Binlogged statements run locally on the source replica (as an operator's
// ANALYZE TABLE is), once in domain 0 under the replica's own server_id and
// once in a domain of its own, then rows from the primary: the saved
// position keeps one GTID per domain, the relay restarts from it, and every
// row arrives once.
func TestLocalWritesOnTheReplicaKeepOneGTIDPerDomain(t *testing.T) {
	testenv.Integration(t)
	testenv.Only(t, false, "GTID domains are MariaDB's; TestMySQLLocalWritesOnTheReplica is MySQL's case")
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	name := testenv.UniqueName("localwrite")
	cfg := relaytest.RelayConfig(name, relaytest.SeedTable(db.Name), noSweeper)
	r := relaytest.StartRelay(t, cfg)

	ctx := context.Background()
	replica := testenv.Open(t, testenv.ReplicaDSN, "")
	rconn, err := replica.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rconn.Close()
	rexec := func(q string) {
		t.Helper()
		if _, err := rconn.ExecContext(ctx, q); err != nil {
			t.Fatalf("on the replica: %s: %v", q, err)
		}
	}
	analyze := "ANALYZE TABLE `" + db.Name + "`.producer_message"

	// Step 1: domain 0, the replica's server_id. With gtid_strict_mode on,
	// the primary's next GTID could be refused as out of order, so strict
	// mode is off until the replica has applied a primary GTID past the
	// local one.
	strict := queryString(t, replica, "SELECT @@global.gtid_strict_mode")
	t.Cleanup(func() {
		if _, err := replica.Exec("SET GLOBAL gtid_strict_mode = " + strict); err != nil {
			t.Errorf("restoring gtid_strict_mode on the replica: %v", err)
		}
		replicaHealthy(t, db)
	})
	rexec("SET GLOBAL gtid_strict_mode = 0")
	rexec(analyze)
	localGTID := queryString(t, rconn, "SELECT @@session.last_gtid")
	local0, _, _ := gtidSeq(localGTID, 0)
	if !strings.HasPrefix(localGTID, "0-2-") {
		t.Fatalf("the local statement was logged as %q, want domain 0 under the replica's server_id 2", localGTID)
	}
	first := insertOrders(t, db, br.Exchange, "lw1", 50, 100)
	testenv.Eventually(t, 30*time.Second, func() bool {
		seq, server, ok := gtidSeq(queryString(t, replica, "SELECT @@global.gtid_slave_pos"), 0)
		return ok && server == 1 && seq > local0
	}, "the replica did not apply a primary GTID past its local %s", localGTID)
	rexec("SET GLOBAL gtid_strict_mode = " + strict)

	// Step 2: a domain of the session's own.
	rexec(fmt.Sprintf("SET SESSION gtid_domain_id = %d", localDomain))
	rexec(analyze)
	localGTID2 := queryString(t, rconn, "SELECT @@session.last_gtid")
	rexec("SET SESSION gtid_domain_id = 0")
	seqD, _, ok := gtidSeq(localGTID2, localDomain)
	if !ok {
		t.Fatalf("the local statement was logged as %q, want domain %d", localGTID2, localDomain)
	}
	// The primary logs a later GTID in that domain, so every server ends up
	// with it (see localDomain).
	pconn, err := db.Primary.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{fmt.Sprintf("SET SESSION gtid_domain_id = %d", localDomain),
		fmt.Sprintf("SET SESSION gtid_seq_no = %d", seqD+1), analyze, "SET SESSION gtid_domain_id = 0"} {
		if _, err := pconn.ExecContext(ctx, q); err != nil {
			t.Fatalf("on the primary: %s: %v", q, err)
		}
	}
	pconn.Close()
	first = append(first, insertOrders(t, db, br.Exchange, "lw2", 50, 100)...)
	testenv.Eventually(t, 60*time.Second, func() bool { return got.Len() >= len(first) }, "received %d of %d", got.Len(), len(first))
	waitCheckpointCovers(t, "binlog-relay:"+name+":checkpoint", primaryGTID(t, db))
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	cp, err := loadCheckpoint(t, "binlog-relay:"+name+":checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	domains := map[string]int{}
	for _, g := range strings.Split(cp.GTIDSet, ",") {
		domains[strings.SplitN(g, "-", 2)[0]]++
	}
	for d, n := range domains {
		if n != 1 {
			t.Fatalf("checkpoint %s holds %d GTIDs in domain %s, want one", cp.GTIDSet, n, d)
		}
	}
	if _, ok := domains[strconv.Itoa(localDomain)]; !ok || domains["0"] != 1 {
		t.Fatalf("checkpoint %s: want one GTID in domain 0 and one in domain %d", cp.GTIDSet, localDomain)
	}
	t.Logf("local writes %s and %s; checkpoint %s", localGTID, localGTID2, cp.GTIDSet)

	// Saved as an older relay did, with the replica's local GTID kept beside
	// the primary's in domain 0 ("0-1-P,0-2-L", which MariaDB refuses as a
	// start position with ERROR 1943): it loads as the last GTID of each
	// domain, the same position.
	old := cp
	old.GTIDSet = cp.GTIDSet + "," + localGTID
	saveCheckpointRaw(t, "binlog-relay:"+name+":checkpoint", old)
	if back, err := loadCheckpoint(t, "binlog-relay:"+name+":checkpoint"); err != nil || back.GTIDSet != cp.GTIDSet {
		t.Fatalf("the old-style checkpoint %s loaded as %q (%v), want %s", old.GTIDSet, back.GTIDSet, err, cp.GTIDSet)
	}

	// The relay starts again from that checkpoint, and check passes.
	r2 := relaytest.StartRelay(t, cfg)
	for _, p := range r2.App.Check(ctx) {
		if p.Severity == "ERROR" {
			t.Errorf("check after the restart: %s", p)
		}
	}
	second := insertOrders(t, db, br.Exchange, "lw3", 100, 100)
	waitDeliveredOnceInOrder(t, got, append(first, second...), 60*time.Second)
}

// Two readers with one server_id on the same source: the source drops the
// older connection each time the other registers; after a few tries with
// backoff a reader stops with ErrServerIDConflict naming the server_id. It
// never treats this as a purged position. MySQL 8+ tells binlog clients
// apart by the @replica_uuid each stream sends (go-mysql a fresh one per
// stream), not by server_id: there two such readers both stream, and the
// relay's guard is the start-up refusal (TestSameServerIDNeverJumps).
func TestReaderServerIDConflict(t *testing.T) {
	testenv.Integration(t)
	testenv.Only(t, false, "MySQL drops a stream only for a second one with the same server_uuid, never for a shared server_id")
	replica := testenv.Open(t, testenv.ReplicaDSN, "")
	gtid := "SELECT @@global.gtid_current_pos"
	if testenv.Current.MySQL {
		gtid = "SELECT @@global.gtid_executed"
	}
	gtid = queryString(t, replica, gtid)
	pos := binlog.Position{Flavor: binlogFlavor(), GTIDSet: gtid}
	sh, sp := testenv.HostPort(testenv.ReplicaDSN)
	serverID := uint32(400_000 + time.Now().UnixNano()%100_000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	for i := 0; i < 2; i++ {
		r, err := binlog.New(binlog.Config{Host: sh, Port: uint16(sp), User: "root", Flavor: binlogFlavor(), ServerID: serverID,
			ReconnectMin: 100 * time.Millisecond, ReconnectMax: time.Second}, nil,
			binlog.WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))))
		if err != nil {
			t.Fatal(err)
		}
		out := make(chan binlog.Event, 16)
		go func() {
			for {
				select {
				case <-out:
				case <-ctx.Done():
					return
				}
			}
		}()
		go func() { errs <- r.Run(ctx, pos, out) }()
	}
	// Keep the binlog moving so both streams read.
	db := testenv.NewDB(t, "schema/producer_message.sql")
	var err error
	testenv.Eventually(t, 50*time.Second, func() bool {
		db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (UUID(), 'x', 'k', '{}')")
		select {
		case err = <-errs:
			return true
		default:
			return false
		}
	}, "neither reader stopped on the server_id conflict")
	cancel()
	if !errors.Is(err, binlog.ErrServerIDConflict) || errors.Is(err, binlog.ErrPositionPurged) ||
		!strings.Contains(err.Error(), fmt.Sprintf("server_id %d", serverID)) || strings.Contains(err.Error(), "source.server_id") {
		t.Fatalf("reader stopped with %v; want ErrServerIDConflict naming server_id %d (and no configuration key: the reader is a library)", err, serverID)
	}
	t.Logf("reader stopped: %v", err)
}

// CompressionSetting on MariaDB, which has no binlog transaction compression.
func TestCompressionSettingOnMariaDB(t *testing.T) {
	testenv.Integration(t)
	testenv.Only(t, false, "MySQL has binlog_transaction_compression: TestMySQLCompressedTransactions")
	v, err := sourceinfo.CompressionSetting(context.Background(), testenv.Open(t, testenv.ReplicaDSN, ""))
	if err != nil || v != "" {
		t.Fatalf("CompressionSetting on MariaDB = %q, %v; want \"\" (no such variable) and no error", v, err)
	}
}

// saveCheckpointRaw stores a checkpoint as it is, as an older relay would
// have written it.
func saveCheckpointRaw(t *testing.T, key string, cp checkpoint.Checkpoint) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr})
	defer rc.Close()
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(context.Background(), key, b, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

// A relay stopped between XA PREPARE and XA COMMIT: the branch's rows lived
// only in its memory, so its checkpoint stayed before the prepare and the
// next relay reads the branch again and publishes it on the XA COMMIT. The
// sweeper is off: every delivery comes from the binlog.
func TestXAPreparedAcrossARestart(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	cfg := relaytest.RelayConfig(testenv.UniqueName("xarestart"), relaytest.SeedTable(db.Name), noSweeper)
	first := relaytest.StartRelay(t, cfg)

	ctx := context.Background()
	xid := testenv.UniqueName("xp")
	t.Cleanup(func() { _, _ = db.Primary.Exec("XA ROLLBACK '" + xid + "'") })
	conn := testenv.Open(t, testenv.PrimaryDSN, db.Name)
	conn.SetMaxOpenConns(1)
	stmt, branchIDs := orderInsert(br.Exchange, "xa-restart", 0, 3)
	for _, q := range []string{"XA START '" + xid + "'", stmt, "XA END '" + xid + "'", "XA PREPARE '" + xid + "'"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = conn.Close()
	fence := insertOrders(t, db, br.Exchange, "fence1", 1, 1)
	testenv.Eventually(t, 30*time.Second, func() bool { return got.Len() >= 1 }, "the row after the prepare did not arrive")
	if err := first.Stop(); err != nil {
		t.Fatalf("stopping the first relay: %v", err)
	}

	relaytest.StartRelay(t, cfg)
	if _, err := db.Primary.ExecContext(ctx, "XA COMMIT '"+xid+"'"); err != nil {
		t.Fatalf("XA COMMIT: %v", err)
	}
	fence2 := insertOrders(t, db, br.Exchange, "fence2", 1, 1)
	testenv.Eventually(t, 30*time.Second, func() bool {
		for _, m := range got.All() {
			if m.MessageID == fence2[0] {
				return true
			}
		}
		return false
	}, "the row after the XA COMMIT did not arrive; received %v", ids(got.All()))
	// The first fence may come twice (replayed from before the prepare);
	// the branch's rows come once each, in order, before the second fence.
	var rest []string
	fenceSeen := 0
	for _, id := range ids(got.All()) {
		if id == fence[0] {
			fenceSeen++
			continue
		}
		rest = append(rest, id)
	}
	want := append(append([]string{}, branchIDs...), fence2...)
	if strings.Join(rest, " ") != strings.Join(want, " ") || fenceSeen < 1 || fenceSeen > 2 {
		t.Fatalf("received %v; want %s once or twice, then %v", ids(got.All()), fence[0], want)
	}
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == 5 },
		"statuses on the primary: %v", statusCounts(t, db.Primary))
}
