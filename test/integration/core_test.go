package integration

import (
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
)

// insertOrders inserts txs transactions of perTx outbox rows each, routed to
// the test exchange, and returns the message ids in commit order.
func insertOrders(t *testing.T, db *testenv.DB, exchange, prefix string, txs, perTx int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < txs; i++ {
		var b strings.Builder
		b.WriteString("INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES ")
		for j := 0; j < perTx; j++ {
			id := fmt.Sprintf("%s-%06d-%04d", prefix, i, j)
			ids = append(ids, id)
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s', '%s', 'order.created', '{\"order\":\"%s\"}')", id, exchange, id)
		}
		tx, err := db.Primary.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(b.String()); err != nil {
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
	br := testenv.NewBroker(t)
	got := br.Consume(t, br.Queue)
	r := testenv.StartRelay(t, testenv.RelayConfig(testenv.UniqueName("core"), testenv.SeedTable(db.Name), ""))

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
