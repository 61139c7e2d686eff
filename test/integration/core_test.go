package integration

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// orderInsert builds one multi-row INSERT of perTx outbox rows for
// transaction number i, routed to exchange, and returns it with the rows'
// message ids in insert order.
func orderInsert(exchange, prefix string, i, perTx int) (string, []string) {
	ids := make([]string, perTx)
	stmt := outboxInsert(0, perTx, func(j int) string {
		ids[j] = fmt.Sprintf("%s-%06d-%04d", prefix, i, j)
		return fmt.Sprintf("('%s', '%s', 'order.created', '{\"order\":\"%s\"}')", ids[j], exchange, ids[j])
	})
	return stmt, ids
}

// outboxInsert is one INSERT of the producer_message rows from to to-1,
// row writing each one's (message_id, exchange, routing_key, content).
func outboxInsert(from, to int, row func(i int) string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES ")
	for i := from; i < to; i++ {
		if i > from {
			b.WriteByte(',')
		}
		b.WriteString(row(i))
	}
	return b.String()
}

// insertOrders inserts txs transactions of perTx outbox rows each, routed to
// the test exchange, and returns the message ids in commit order.
func insertOrders(t *testing.T, db *testenv.DB, exchange, prefix string, txs, perTx int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < txs; i++ {
		stmt, batch := orderInsert(exchange, prefix, i, perTx)
		ids = append(ids, batch...)
		tx, err := db.Primary.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(stmt); err != nil {
			t.Fatalf("insert: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

func statusCounts(t *testing.T, db *sql.DB) map[string]int {
	t.Helper()
	rows, err := db.Query("SELECT status, COUNT(*) FROM producer_message GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

// Test 1: 10,000 rows in 100 transactions of 100 arrive once each, in commit
// order, and all end SENT.
func TestRelayDeliversInCommitOrder(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	r := relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("core"), relaytest.SeedTable(db.Name), ""))

	start := time.Now()
	want := insertOrders(t, db, br.Exchange, "ord", 100, 100)
	testenv.Eventually(t, 60*time.Second, func() bool { return got.Len() >= len(want) },
		"received %d of %d messages", got.Len(), len(want))
	t.Logf("10,000 rows relayed in %s", time.Since(start).Round(time.Millisecond))

	msgs := got.All()
	if len(msgs) != len(want) {
		t.Fatalf("received %d messages, want exactly %d", len(msgs), len(want))
	}
	for i, m := range msgs {
		if m.MessageID != want[i] {
			t.Fatalf("message %d is %s, want %s (commit order broken)", i, m.MessageID, want[i])
		}
		if m.RoutingKey != "order.created" || string(m.Body) != fmt.Sprintf(`{"order":"%s"}`, want[i]) {
			t.Fatalf("message %d: routing key %q body %q", i, m.RoutingKey, m.Body)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == len(want) },
		"statuses on the primary: %v", statusCounts(t, db.Primary))
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// Test 2: a rolled-back transaction publishes nothing.
func TestRelayIgnoresRolledBackTransactions(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("rollback"), relaytest.SeedTable(db.Name), ""))

	tx, err := db.Primary.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := tx.Exec("INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'order.created', '{}')",
			fmt.Sprintf("rolled-back-%d", i), br.Exchange); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// A committed row after it: once it arrives, anything the rollback
	// could have produced would have arrived before it.
	after := insertOrders(t, db, br.Exchange, "after", 1, 1)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= 1 }, "the committed row did not arrive")
	msgs := got.All()
	if len(msgs) != 1 || msgs[0].MessageID != after[0] {
		ids := []string{}
		for _, m := range msgs {
			ids = append(ids, m.MessageID)
		}
		t.Fatalf("received %v, want only %s", ids, after[0])
	}
}

// Test 5: a row to an exchange that does not exist, and one the broker
// cannot route (no binding), are not marked SENT; they go to the retry path
// with the broker's reason, and the rows after them still arrive.
func TestRelayUnroutableRowsAreNotMarkedSent(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	unbound := testenv.NewExchange(t) // exists, but no queue is bound
	relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("unroutable"), relaytest.SeedTable(db.Name), ""))

	missing := testenv.UniqueName("no_such_exchange")
	db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES
		('m-before', ?, 'k', '1'), ('m-missing', ?, 'k', '2'), ('m-unbound', ?, 'k', '3'), ('m-after', ?, 'k', '4')`,
		br.Exchange, missing, unbound, br.Exchange)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= 2 }, "got %d messages", got.Len())
	ids := []string{}
	for _, m := range got.All() {
		ids = append(ids, m.MessageID)
	}
	if fmt.Sprint(ids) != "[m-before m-after]" {
		t.Fatalf("received %v, want [m-before m-after]", ids)
	}
	type rowState struct {
		status  string
		retries int
		errMsg  sql.NullString
	}
	read := func(id string) rowState {
		var r rowState
		if err := db.Primary.QueryRow("SELECT status, retry_count, error_msg FROM producer_message WHERE message_id = ?", id).
			Scan(&r.status, &r.retries, &r.errMsg); err != nil {
			t.Fatal(err)
		}
		return r
	}
	testenv.Eventually(t, 10*time.Second, func() bool { return read("m-after").status == "SENT" }, "m-after not SENT")
	if s := read("m-before"); s.status != "SENT" {
		t.Fatalf("m-before is %s, want SENT", s.status)
	}
	// The failure records and the SENT marks are separate statements of the
	// status writer: m-after's mark may land before them.
	testenv.Eventually(t, 10*time.Second, func() bool { return read("m-missing").retries > 0 && read("m-unbound").retries > 0 },
		"the failures were not recorded: %+v, %+v", read("m-missing"), read("m-unbound"))
	m := read("m-missing")
	if m.status != "PENDING" || m.retries != 1 || !strings.Contains(m.errMsg.String, "does not exist") || !strings.Contains(m.errMsg.String, missing) {
		t.Fatalf("row to a missing exchange: %+v, want PENDING, retry 1, error naming the exchange", m)
	}
	u := read("m-unbound")
	if u.status != "PENDING" || u.retries != 1 || !strings.Contains(u.errMsg.String, "NO_ROUTE") {
		t.Fatalf("unroutable row: %+v, want PENDING, retry 1, error with the broker's NO_ROUTE", u)
	}
}

// ordering: strict holds the stream on a failed row and retries it in
// place: nothing behind it is published until it goes through.
func TestRelayStrictOrderingHoldsTheStream(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	unbound := testenv.NewExchange(t)
	relaytest.StartRelay(t, relaytest.Config{Name: testenv.UniqueName("strict"),
		Tables: relaytest.SeedTable(db.Name), Strict: true, Extra: "retry: {base: 100ms, max: 400ms}\n"}.YAML())
	db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES
		('s1', ?, 'k', '1'), ('s2', ?, 'k', '2'), ('s3', ?, 'k', '3')`, br.Exchange, unbound, br.Exchange)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= 1 }, "s1 did not arrive")
	// s2 cannot be routed for a while: the stream must hold behind it.
	time.Sleep(1500 * time.Millisecond)
	if n := got.Len(); n != 1 {
		t.Fatalf("%d messages arrived while s2 was unroutable; strict ordering must hold s3 back", n)
	}
	var status string
	if err := db.Primary.QueryRow("SELECT status FROM producer_message WHERE message_id='s2'").Scan(&status); err != nil || status != "PENDING" {
		t.Fatalf("s2 is %q (%v) while held, want PENDING", status, err)
	}
	// Make s2 routable: bind a queue to its exchange.
	bindAt := time.Now()
	br.BindQueueTo(t, br.Queue, unbound)
	testenv.Eventually(t, 20*time.Second, func() bool { return got.Len() >= 3 }, "got %d of 3", got.Len())
	msgs := got.All()
	if msgs[1].MessageID != "s2" || msgs[2].MessageID != "s3" {
		t.Fatalf("order %s %s %s, want s1 s2 s3", msgs[0].MessageID, msgs[1].MessageID, msgs[2].MessageID)
	}
	if msgs[2].At.Before(bindAt) {
		t.Fatal("s3 arrived before s2 could be routed")
	}
}
