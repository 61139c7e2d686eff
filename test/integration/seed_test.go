package integration

// Seed tests: the outbox tables exactly as the design documents write them
// (testdata/seed/seed-ddl.sql, unchanged), not the tidied-up DDL in schema/:
// no AUTO_INCREMENT on producer_message, no unique message_id there, TEXT
// payloads, DATETIME without fractions, a nullable tag, a biz_id shared by
// every event of one order.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

const seedDDL = "testdata/seed/seed-ddl.sql"

// Each seed table, through its preset, publishes every row once with a
// message id of its own, and is marked sent in the table's own values.
func TestSeedTablesThroughPresets(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, seedDDL)
	br, got := testenv.NewCollectedBroker(t)
	startDropin(t, fmt.Sprintf(`  - {preset: producer-message, schema: %[1]s}
  - {preset: local-message, schema: %[1]s}
  - {preset: message-record, schema: %[1]s}
`, db.Name))

	// producer_message: the application supplies a snowflake id.
	const pm = 50
	for i := 0; i < pm; i++ {
		db.Exec(t, `INSERT INTO producer_message (id, message_id, exchange, routing_key, content, status, create_time)
			VALUES (?, ?, ?, 'order.created', ?, 'PENDING', NOW())`,
			int64(1811234567890000000)+int64(i)*4096, fmt.Sprintf("pm-%03d", i), br.Exchange, fmt.Sprintf(`{"pm":%d}`, i))
	}
	// local_message: 2,000 events of 5 orders, each order paid then
	// shipped over and over: biz_id repeats, the message id must not.
	const lm, orders = 2000, 5
	for batch := 0; batch < lm/200; batch++ {
		var vals []string
		var args []any
		for j := 0; j < 200; j++ {
			n := batch*200 + j
			typ := "ORDER_PAY"
			if n%2 == 1 {
				typ = "ORDER_SHIP"
			}
			vals = append(vals, "(?, ?, ?, 'order.event', ?, 0)")
			args = append(args, fmt.Sprintf("order-%d", n%orders), typ, br.Exchange, fmt.Sprintf(`{"lm":%d}`, n))
		}
		db.Exec(t, "INSERT INTO local_message (biz_id, biz_type, exchange, routing_key, message_body, status) VALUES "+
			strings.Join(vals, ", "), args...)
	}
	// t_message_record: a NULL tag publishes with the empty routing key.
	db.Exec(t, `INSERT INTO t_message_record (message_id, topic, tag, message_body, status, create_time) VALUES
		('mr-1', ?, 'TagA', 'record one', 'PENDING', NOW()),
		('mr-2', ?, NULL, 'record two', 'PENDING', NOW())`, br.Exchange, br.Exchange)

	total := pm + lm + 2
	t.Cleanup(func() {
		if t.Failed() {
			for _, q := range []string{"SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'",
				"SELECT COUNT(*) FROM local_message WHERE status = 1", "SELECT COUNT(*) FROM t_message_record WHERE status = 'SENT'"} {
				t.Logf("%s: %d", q, db.Count(t, q))
			}
		}
	})
	msgs := dropinWait(t, got, total, 90*time.Second)
	ids := map[string]bool{}
	bizIDs := map[string]int{}
	var lmSeen int
	var nullTag *testenv.Delivery
	for i := range msgs {
		m := msgs[i]
		if ids[m.MessageID] {
			t.Fatalf("message id %q published twice (body %q)", m.MessageID, m.Body)
		}
		ids[m.MessageID] = true
		if strings.HasPrefix(string(m.Body), `{"lm":`) {
			lmSeen++
			b, _ := dropinHeader(m, "biz_id")
			bizIDs[b]++
			if typ, _ := dropinHeader(m, "biz_type"); typ != "ORDER_PAY" && typ != "ORDER_SHIP" {
				t.Fatalf("local_message event %s: header biz_type %q", m.MessageID, typ)
			}
		}
		if m.MessageID == "mr-2" {
			nullTag = &msgs[i]
		}
	}
	if lmSeen != lm || len(bizIDs) != orders {
		t.Fatalf("local_message: %d events over %d biz_ids, want %d over %d", lmSeen, len(bizIDs), lm, orders)
	}
	t.Logf("%d messages, %d distinct message ids; local_message: %d events, %d biz_ids", len(msgs), len(ids), lmSeen, len(bizIDs))
	if nullTag == nil || nullTag.RoutingKey != "" || string(nullTag.Body) != "record two" {
		t.Fatalf("the t_message_record row with a NULL tag: %+v, want routing key \"\"", nullTag)
	}
	if _, ok := nullTag.Headers["tag"]; ok {
		t.Fatalf("a NULL tag became a header: %v", nullTag.Headers)
	}
	dropinEventuallyCount(t, db, pm, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT' AND version = 1")
	dropinEventuallyCount(t, db, lm, "SELECT COUNT(*) FROM local_message WHERE status = 1")
	dropinEventuallyCount(t, db, 2, "SELECT COUNT(*) FROM t_message_record WHERE status = 'SENT'")
}

// A row whose exchange or message id is NULL cannot be published: it ends
// FAILED with the reason in its error column (at once with max_retries 1),
// and the rows behind it flow on.
func TestNullExchangeOrMessageIDIsFailed(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t)
	db.Exec(t, `CREATE TABLE events (
		id BIGINT PRIMARY KEY AUTO_INCREMENT,
		msg_id VARCHAR(64) NULL UNIQUE,
		target VARCHAR(100) NULL,
		body TEXT NOT NULL,
		state VARCHAR(20) NOT NULL DEFAULT 'NEW',
		retries INT NOT NULL DEFAULT 0,
		err VARCHAR(300) NULL,
		created DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`)
	db.WaitReplicated(t, 30*time.Second)
	br, got := testenv.NewCollectedBroker(t)
	startDropin(t, fmt.Sprintf(`  - schema: %s
    name: events
    columns: {id: id, message_id: msg_id, exchange: target, payload: body, status: state, retry_count: retries, error: err, created_at: created}
    statuses: {pending: NEW, sent: DONE, failed: DEAD, publishable: [NEW]}
`, db.Name))

	db.Exec(t, `INSERT INTO events (msg_id, target, body) VALUES
		('e-1', NULL, 'no exchange'), (NULL, ?, 'no message id'), ('e-3', ?, 'fine')`, br.Exchange, br.Exchange)
	msgs := dropinWait(t, got, 1, 20*time.Second)
	if msgs[0].MessageID != "e-3" {
		t.Fatalf("published %s, want only e-3", msgs[0].MessageID)
	}
	dropinEventuallyCount(t, db, 1, "SELECT COUNT(*) FROM events WHERE state = 'DONE'")
	// FAILED at the first attempt (max_retries is the default 5): retrying
	// cannot give the row an exchange or an id.
	dropinEventuallyCount(t, db, 2, "SELECT COUNT(*) FROM events WHERE state = 'DEAD' AND retries = 1")
	for _, c := range []struct{ body, reason string }{
		{"no exchange", `exchange column "target" is NULL`},
		{"no message id", `message id column "msg_id" is NULL`},
	} {
		var reason string
		if err := db.Primary.QueryRow("SELECT COALESCE(err, '') FROM events WHERE body = ?", c.body).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(reason, c.reason) {
			t.Fatalf("row %q: error column %q, want it to say %q", c.body, reason, c.reason)
		}
	}
}

// check warns about a message-id column that several rows may share, and
// only about that: the seed producer_message has no unique key on
// message_id; local_message publishes its primary key; t_message_record has
// uk_message_id.
func TestCheckWarnsMessageIDWithoutUniqueIndex(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, seedDDL)
	old := testenv.NewDB(t, seedDDL) // mapped the way the preset used to be
	lines := runCheck(t, relaytest.RelayConfig(testenv.UniqueName("chk"), fmt.Sprintf(`  - {preset: producer-message, schema: %[1]s}
  - {preset: local-message, schema: %[1]s}
  - {preset: message-record, schema: %[1]s}
  - {preset: local-message, schema: %[2]s, columns: {message_id: biz_id}}
`, db.Name, old.Name), ""))
	want := "several rows may share a message id; consumers that deduplicate by it will drop events"
	if !findLine(lines, "WARN", db.Name+".producer_message", `"message_id"`, "columns.message_id", want) {
		t.Fatalf("no warning about producer_message.message_id in:\n%s", strings.Join(lines, "\n"))
	}
	if !findLine(lines, "WARN", old.Name+".local_message", `"biz_id"`, want) {
		t.Fatalf("no warning about local_message mapped by biz_id in:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.Contains(l, want) && (strings.Contains(l, "t_message_record") || strings.Contains(l, db.Name+".local_message")) {
			t.Fatalf("warning about a unique message id: %s", l)
		}
	}
}
