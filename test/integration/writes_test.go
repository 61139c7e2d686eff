package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// How applications write their outbox rows, beyond one INSERT per message.

// bodiesByID maps each delivery's message id to the bodies it arrived with,
// in arrival order.
func bodiesByID(msgs []testenv.Delivery) map[string][]string {
	out := map[string][]string{}
	for _, m := range msgs {
		out[m.MessageID] = append(out[m.MessageID], string(m.Body))
	}
	return out
}

// waitReceived waits until got holds at least n messages.
func waitReceived(t *testing.T, got *testenv.Collector, n int, within time.Duration) {
	t.Helper()
	testenv.WaitFor(t, within, fmt.Sprintf("%d messages", n), func() (bool, string) {
		return got.Len() >= n, fmt.Sprintf("received %d", got.Len())
	})
}

// waitStatus waits until the row with msgID has status want on the primary.
func waitStatus(t *testing.T, db *testenv.DB, msgID, want string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, msgID+" "+want, func() (bool, string) {
		s := statusOf(t, db, msgID)
		return s == want, s
	})
}

func statusOf(t *testing.T, db *testenv.DB, msgID string) string {
	t.Helper()
	var s string
	if err := db.Primary.QueryRow("SELECT status FROM producer_message WHERE message_id = ?", msgID).Scan(&s); err != nil {
		return "(" + err.Error() + ")"
	}
	return s
}

// A transaction that inserts rows and then updates or deletes some of them
// (an ORM flushing an entity twice, the Debezium insert-and-delete) publishes
// each row as the transaction committed it: the updated body, nothing for a
// row moved to a status that is not publishable, and a deleted row as last
// written (and not counted as a duplicate when there is nothing to mark).
func TestRowUpdatedInItsTransactionIsPublishedAsCommitted(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	r := relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("intx"), relaytest.SeedTable(db.Name), noSweeper))

	tx, err := db.Primary.Begin()
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for i := 1; i <= 5; i++ {
		exec("INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'order.created', ?)",
			fmt.Sprintf("intx-%d", i), br.Exchange, `{"draft":true}`)
	}
	exec("UPDATE producer_message SET content = '{\"total\":42}' WHERE message_id = 'intx-2'")
	exec("UPDATE producer_message SET content = '{\"total\":43}' WHERE message_id = 'intx-2'")
	exec("UPDATE producer_message SET status = 'FAILED' WHERE message_id = 'intx-3'")
	exec("DELETE FROM producer_message WHERE message_id = 'intx-4'")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// A later transaction's row: once it arrives, everything of the first
	// transaction has.
	insertOrders(t, db, br.Exchange, "after", 1, 1)

	want := map[string][]string{
		"intx-1": {`{"draft":true}`}, "intx-2": {`{"total":43}`}, "intx-4": {`{"draft":true}`}, "intx-5": {`{"draft":true}`},
		"after-000000-0000": {`{"order":"after-000000-0000"}`},
	}
	waitReceived(t, got, len(want), 30*time.Second)
	gotBodies := bodiesByID(got.All())
	if fmt.Sprint(gotBodies) != fmt.Sprint(want) {
		t.Fatalf("published %v\nwant      %v", gotBodies, want)
	}
	for id, st := range map[string]string{"intx-1": "SENT", "intx-2": "SENT", "intx-3": "FAILED", "intx-5": "SENT"} {
		waitStatus(t, db, id, st)
	}
	if n := r.App.Relay().Stats.AlreadySent.Load(); n != 0 {
		t.Fatalf("%d rows counted as already sent (duplicates); want 0", n)
	}
}

// A transaction past the reader's buffer (5,000 rows) sends its first rows
// before its commit; a row it updates after that is published again in its
// committed version, after the rest, and every row arrives.
func TestLargeTransactionUpdatingAnEarlyRowPublishesTheCommittedVersion(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("bigtx"), relaytest.SeedTable(db.Name), noSweeper))

	const rows, perStmt = 12_000, 1_000
	tx, err := db.Primary.Begin()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 0; i < rows/perStmt; i++ {
		stmt, ids := orderInsert(br.Exchange, "big", i, perStmt)
		if _, err := tx.Exec(stmt); err != nil {
			t.Fatal(err)
		}
		want = append(want, ids...)
	}
	if _, err := tx.Exec("UPDATE producer_message SET content = '{\"final\":true}' WHERE message_id = ?", want[0]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitReceived(t, got, rows+1, 60*time.Second)
	msgs := got.All()
	if len(msgs) != rows+1 {
		t.Fatalf("received %d messages, want %d", len(msgs), rows+1)
	}
	for i, id := range want {
		if msgs[i].MessageID != id {
			t.Fatalf("message %d is %s, want %s", i, msgs[i].MessageID, id)
		}
	}
	last := msgs[rows]
	if last.MessageID != want[0] || string(last.Body) != `{"final":true}` {
		t.Fatalf("last message %s %s; want %s with the committed body", last.MessageID, last.Body, want[0])
	}
	// The first rows were sent before the commit, as inserted.
	if string(msgs[0].Body) != fmt.Sprintf(`{"order":"%s"}`, want[0]) {
		t.Fatalf("first message body %s", msgs[0].Body)
	}
}

// A row put back to a publishable status is published by the binlog path at
// once (the sweeper is off here): an application's UPDATE back to PENDING,
// INSERT ... ON DUPLICATE KEY UPDATE, REPLACE (by id and message id: both
// flavours log it as a DELETE and an INSERT). A re-queue with its
// next_retry_time ahead is left to the sweeper until due.
func TestRequeuedRowIsPublishedByTheBinlogPath(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	r := relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("requeue"), relaytest.SeedTable(db.Name), noSweeper))

	ids := insertOrders(t, db, br.Exchange, "rq", 1, 4)
	waitReceived(t, got, 4, 30*time.Second)
	testenv.Eventually(t, 10*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == 4 },
		"statuses %v", statusCounts(t, db.Primary))

	db.Exec(t, "UPDATE producer_message SET status = 'PENDING', content = '{\"requeued\":1}' WHERE message_id = ?", ids[0])
	db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'order.created', '{\"upsert\":1}') "+
		"ON DUPLICATE KEY UPDATE status = 'PENDING', content = '{\"upsert\":1}'", ids[1], br.Exchange)
	var id3 int64
	if err := db.Primary.QueryRow("SELECT id FROM producer_message WHERE message_id = ?", ids[2]).Scan(&id3); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, "REPLACE INTO producer_message (id, message_id, exchange, routing_key, content) VALUES (?, ?, ?, 'order.created', '{\"replace\":1}')",
		id3, ids[2], br.Exchange)
	db.Exec(t, "UPDATE producer_message SET status = 'PENDING', next_retry_time = NOW(3) + INTERVAL 1 HOUR WHERE message_id = ?", ids[3])
	after := insertOrders(t, db, br.Exchange, "rq-after", 1, 1)

	waitReceived(t, got, 8, 30*time.Second)
	msgs := got.All()
	var tail []string
	for _, m := range msgs[4:] {
		tail = append(tail, m.MessageID+" "+string(m.Body))
	}
	wantTail := []string{ids[0] + ` {"requeued":1}`, ids[1] + ` {"upsert":1}`, ids[2] + ` {"replace":1}`,
		after[0] + fmt.Sprintf(` {"order":"%s"}`, after[0])}
	if fmt.Sprint(tail) != fmt.Sprint(wantTail) {
		t.Fatalf("after the re-queues: %q\nwant %q", tail, wantTail)
	}
	for _, id := range ids[:3] {
		waitStatus(t, db, id, "SENT")
	}
	if s := statusOf(t, db, ids[3]); s != "PENDING" {
		t.Fatalf("the row due in an hour is %s; want PENDING, left to the sweeper", s)
	}
	if n := r.App.Relay().Stats.AlreadySent.Load(); n != 0 {
		t.Fatalf("%d rows counted as already sent; want 0", n)
	}
}

// A re-queue by REPLACE or by an upsert whose next_retry_time is ahead
// waits for it on both flavours (both log that REPLACE, by id and message
// id, as a DELETE and an INSERT, and the upsert as an UPDATE): the sweeper
// publishes each once, after its time. A new row is published at once by
// the binlog path whatever its next_retry_time: one inserted with it ahead
// (an application whose own retry job polls the table sets "now plus a
// delay"), and one with create_time = next_retry_time a minute ahead of the
// primary's clock (an application whose clock runs fast writes both).
func TestRequeueWithARetryTimeAheadWaitsForIt(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, lifecycleConfig("rqlater", db, "interval: 100ms, grace_period: 1s"))

	sent := insertAged(t, db, br.Exchange, "later", "SENT", 2, time.Hour)
	const ahead = "NOW(3) + INTERVAL 4 SECOND"
	db.Exec(t, "REPLACE INTO producer_message (id, message_id, exchange, routing_key, content, next_retry_time) "+
		"SELECT id, message_id, exchange, routing_key, '{\"replace\":1}', "+ahead+" FROM (SELECT * FROM producer_message WHERE message_id = ?) AS old", sent[0])
	db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'order.created', '{\"upsert\":1}') "+
		"ON DUPLICATE KEY UPDATE status = 'PENDING', content = '{\"upsert\":1}', next_retry_time = "+ahead, sent[1], br.Exchange)
	db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content, next_retry_time) VALUES ('later-new', ?, 'order.created', '{}', "+ahead+")", br.Exchange)
	db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content, create_time, next_retry_time) "+
		"VALUES ('fast-clock', ?, 'order.created', '{}', NOW(3) + INTERVAL 1 MINUTE, NOW(3) + INTERVAL 1 MINUTE)", br.Exchange)
	later := []string{sent[0], sent[1]}
	dueAt := map[string]time.Time{}
	for _, id := range append(later, "later-new") {
		var ms int64
		if err := db.Primary.QueryRow("SELECT CAST(UNIX_TIMESTAMP(next_retry_time) * 1000 AS SIGNED) FROM producer_message WHERE message_id = ?", id).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		dueAt[id] = time.UnixMilli(ms)
	}

	testenv.WaitFor(t, 30*time.Second, "the four rows", func() (bool, string) {
		return got.Len() >= 2+len(later), fmt.Sprint(messageIDs(got.All()))
	})
	waitQuiet(t, got, 2*time.Second, 30*time.Second)
	byID := map[string][]testenv.Delivery{}
	for _, d := range got.All() {
		byID[d.MessageID] = append(byID[d.MessageID], d)
	}
	for _, id := range []string{"fast-clock", "later-new"} {
		if n := len(byID[id]); n != 1 {
			t.Errorf("new row %s arrived %d times, want once", id, n)
		} else if byID[id][0].At.After(dueAt["later-new"]) {
			t.Errorf("new row %s was deferred: arrived at %s, after its next_retry_time %s", id, byID[id][0].At, dueAt["later-new"])
		}
	}
	for _, id := range later {
		ds := byID[id]
		if len(ds) != 1 {
			t.Errorf("%s arrived %d times, want once", id, len(ds))
			continue
		}
		// The DATETIME(3) and the collector's clock are the same machine's.
		if early := dueAt[id].Sub(ds[0].At); early > 100*time.Millisecond {
			t.Errorf("%s arrived %s before its next_retry_time", id, early.Round(time.Millisecond))
		}
	}
	for _, id := range append(later, "fast-clock", "later-new") {
		waitStatus(t, db, id, "SENT")
	}
}

// rotate archives the outbox table the way DBAs do: an empty copy renamed
// in under its name in one statement.
func rotate(t *testing.T, db *testenv.DB, archive string) {
	t.Helper()
	db.Exec(t, "CREATE TABLE producer_message_new LIKE producer_message")
	db.Exec(t, "RENAME TABLE producer_message TO "+archive+", producer_message_new TO producer_message")
}

func pendingIn(t *testing.T, db *testenv.DB, table string) int {
	t.Helper()
	return db.Count(t, "SELECT COUNT(*) FROM "+table+" WHERE status <> 'SENT'")
}

// Rows in flight when the table is rotated end SENT in the archive they now
// live in, not PENDING forever (their marks used to go by name to the new
// table). The same holds for a relay that was stopped before the rename and
// reads it after a restart: its first marks of the old rows miss (the
// rename already ran) and are written again to the archive when the stream
// reaches the rename. Those first misses, and the marks the streaming relay
// wrote by name between the rename and reading it, are counted in
// published_already_sent_total (hundreds of rows in a run here), though
// every row is delivered once: it is not asserted 0.
func TestRowsInFlightAcrossATableRenameAreMarkedWhereTheyLive(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	cfg := relaytest.RelayConfig(testenv.UniqueName("rotate"), relaytest.SeedTable(db.Name), noSweeper)
	r := relaytest.StartRelay(t, cfg)

	// Streaming: a writer keeps inserting while the table is rotated.
	var want []string
	writer := relaytest.Go("writer", 60*time.Second, func(ctx context.Context) error {
		for i := 0; i < 200 && ctx.Err() == nil; i++ {
			stmt, ids := orderInsert(br.Exchange, fmt.Sprintf("w%03d", i), 0, 10)
			if _, err := db.Primary.ExecContext(ctx, stmt); err != nil {
				return err
			}
			want = append(want, ids...)
		}
		return nil
	})
	waitReceived(t, got, 500, 30*time.Second)
	rotate(t, db, "producer_message_2026_11")
	if exited, err := writer.Wait(60 * time.Second); !exited || err != nil {
		t.Fatalf("writer: exited %v, %v", exited, err)
	}
	waitDeliveredOnceInOrder(t, got, want, 60*time.Second)
	testenv.WaitFor(t, 20*time.Second, "every row SENT in both tables", func() (bool, string) {
		a, b := pendingIn(t, db, "producer_message_2026_11"), pendingIn(t, db, "producer_message")
		return a == 0 && b == 0, fmt.Sprintf("not SENT: %d in the archive, %d in the new table", a, b)
	})
	if n := db.Count(t, "SELECT COUNT(*) FROM producer_message_2026_11") + db.Count(t, "SELECT COUNT(*) FROM producer_message"); n != len(want) {
		t.Fatalf("%d rows in the two tables, want %d", n, len(want))
	}

	// Across a restart: rows written while the relay is stopped, then the
	// table rotated again, then rows in the new table.
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	before := insertOrders(t, db, br.Exchange, "before", 5, 20)
	rotate(t, db, "producer_message_2026_12")
	after := insertOrders(t, db, br.Exchange, "after", 2, 20)
	relaytest.StartRelay(t, cfg)
	want = append(append(want, before...), after...)
	waitDeliveredOnceInOrder(t, got, want, 60*time.Second)
	testenv.WaitFor(t, 20*time.Second, "every row SENT in the three tables", func() (bool, string) {
		a, b, c := pendingIn(t, db, "producer_message_2026_11"), pendingIn(t, db, "producer_message_2026_12"), pendingIn(t, db, "producer_message")
		return a+b+c == 0, fmt.Sprintf("not SENT: %d, %d in the archives, %d in the new table", a, b, c)
	})
}

// The Debezium outbox pattern: each event is inserted and deleted in the
// same transaction (the table stays empty). Every insert is published, in
// order, with the payload it was inserted with; an UPDATE before the
// DELETE is applied.
func TestDebeziumInsertThenDeleteIsPublished(t *testing.T) {
	testenv.Integration(t)
	t.Parallel()
	db := testenv.NewDB(t, "schema/debezium_outbox.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("dbz-del"), debeziumTables(db.Name), ""))

	var want []string
	for i := 1; i <= 20; i++ {
		id := debeziumID("del", i)
		want = append(want, id)
		tx, err := db.Primary.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{
			"INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES (?, '" + br.Exchange + "', 'a-1', 'Happened', '{\"n\":1}')",
			"UPDATE outbox SET payload = '{\"n\":2}' WHERE id = ?",
			"DELETE FROM outbox WHERE id = ?",
		} {
			if _, err := tx.Exec(q, id); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	waitReceived(t, got, len(want), 30*time.Second)
	msgs := got.All()
	if fmt.Sprint(messageIDs(msgs)) != fmt.Sprint(want) {
		t.Fatalf("delivered %v, want %v", messageIDs(msgs), want)
	}
	for _, m := range msgs {
		if string(m.Body) != `{"n": 2}` && string(m.Body) != `{"n":2}` {
			t.Fatalf("%s body %s; want the updated payload", m.MessageID, m.Body)
		}
	}
	if n := db.Count(t, "SELECT COUNT(*) FROM outbox"); n != 0 {
		t.Fatalf("%d rows in the outbox; want 0", n)
	}
}
