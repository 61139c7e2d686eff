package integration

// Drop-in tests: the relay reads outbox tables as they already are (the five
// presets, custom mappings, several tables in several databases), survives
// ALTER TABLE while rows flow, and publishes payloads byte for byte.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
	"github.com/binlog-relay/binlog-relay/pkg/binlog"
)

// startDropin starts a relay over the given tables YAML.
func startDropin(t *testing.T, tablesYAML string) *relaytest.Relay {
	t.Helper()
	return relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("dropin"), tablesYAML, ""))
}

// dropinWait waits for n deliveries and fails if more than n arrive.
func dropinWait(t *testing.T, got *testenv.Collector, n int, within time.Duration) []testenv.Delivery {
	t.Helper()
	testenv.Eventually(t, within, func() bool { return got.Len() >= n }, "received %d of %d messages", got.Len(), n)
	// A message that must not be published would arrive right behind the
	// others: give it the time to show.
	time.Sleep(300 * time.Millisecond)
	msgs := got.All()
	if len(msgs) != n {
		for _, m := range msgs {
			t.Logf("got %s rk=%s", m.MessageID, m.RoutingKey)
		}
		t.Fatalf("received %d messages, want exactly %d", len(msgs), n)
	}
	return msgs
}

// dropinCount runs a COUNT(*) query on the primary.
func dropinCount(t *testing.T, db *testenv.DB, q string, args ...any) int {
	t.Helper()
	return db.Count(t, q, args...)
}

// dropinEventuallyCount waits for a COUNT(*) query to reach want.
func dropinEventuallyCount(t *testing.T, db *testenv.DB, want int, q string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n := dropinCount(t, db, q, args...); n != want; n = dropinCount(t, db, q, args...) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s = %d, want %d", q, n, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func dropinHeader(d testenv.Delivery, key string) (string, bool) {
	v, ok := d.Headers[key]
	if !ok {
		return "", false
	}
	return fmt.Sprint(v), true
}

// presetAsIs is the tables YAML of one table read with a preset as it is.
func presetAsIs(preset string) func(db, exchange string) string {
	return func(db, _ string) string { return fmt.Sprintf("  - {preset: %s, schema: %s}\n", preset, db) }
}

// Test 1: each preset, on its own DDL from schema/, publishes the rows
// inserted in its "publish me" statuses, routed as the preset says, and
// writes its "sent" value back (nothing for Debezium, which has no status).
func TestPresets(t *testing.T) {
	testenv.Integration(t)
	for _, tc := range []struct {
		name, schema string
		// tables is the tables YAML over the test's database and exchange.
		tables func(db, exchange string) string
		// check asserts what was published and written back.
		check func(t *testing.T, db *testenv.DB, br *testenv.Broker, got *testenv.Collector)
	}{
		{name: "producer-message", schema: "schema/producer_message.sql",
			tables: presetAsIs("producer-message"),
			check:  checkProducerMessage},
		{name: "local-message", schema: "schema/local_message.sql",
			// A preset overridden field by field: the routing key becomes a
			// template over columns; everything else stays the preset's.
			tables: func(db, exchange string) string {
				return fmt.Sprintf("  - preset: local-message\n    schema: %s\n    route: {routing_key: \"{biz_type}.{status}\"}\n", db)
			},
			check: checkLocalMessage},
		{name: "message-record", schema: "schema/message_record.sql",
			tables: presetAsIs("message-record"),
			check:  checkMessageRecord},
		{name: "debezium", schema: "schema/debezium_outbox.sql",
			// Aggregate types map to exchanges; one not in the map falls back to
			// the preset's {aggregatetype} template.
			tables: func(db, exchange string) string {
				return fmt.Sprintf(`  - preset: debezium
    schema: %[1]s
    route:
      exchange_map_column: aggregatetype
      exchange_map: {Order: %[2]s, Customer: %[2]s}
`, db, exchange)
			},
			check: checkDebezium},
		{name: "eventuate", schema: "schema/eventuate_message.sql",
			tables: presetAsIs("eventuate"),
			check:  checkEventuate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := testenv.NewDB(t, tc.schema)
			br, got := testenv.NewCollectedBroker(t)
			startDropin(t, tc.tables(db.Name, br.Exchange))
			tc.check(t, db, br, got)
		})
	}
}

// checkProducerMessage is TestPresets for the producer-message preset.
func checkProducerMessage(t *testing.T, db *testenv.DB, br *testenv.Broker, got *testenv.Collector) {
	// The seed's producers insert SENDING as well as PENDING; a row
	// inserted SENT is not the relay's to publish.
	db.Exec(t, `INSERT INTO producer_message (message_id, exchange, routing_key, content, status) VALUES
		('pm-1', ?, 'order.created', '{"n":1}', 'PENDING'),
		('pm-2', ?, 'order.paid', '{"n":2}', 'SENDING'),
		('pm-3', ?, 'order.old', '{"n":3}', 'SENT'),
		('pm-4', ?, 'order.shipped', '{"n":4}', 'PENDING')`, br.Exchange, br.Exchange, br.Exchange, br.Exchange)
	msgs := dropinWait(t, got, 3, 20*time.Second)
	want := []struct{ id, rk, body string }{{"pm-1", "order.created", `{"n":1}`}, {"pm-2", "order.paid", `{"n":2}`}, {"pm-4", "order.shipped", `{"n":4}`}}
	for i, w := range want {
		if m := msgs[i]; m.MessageID != w.id || m.RoutingKey != w.rk || string(m.Body) != w.body || m.Exchange != br.Exchange {
			t.Fatalf("message %d: %s %s/%s %q, want %s %s/%s %q", i, m.MessageID, m.Exchange, m.RoutingKey, m.Body, w.id, br.Exchange, w.rk, w.body)
		}
	}
	dropinEventuallyCount(t, db, 4, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'")
	// The version column is bumped by the relay's write; the row that was
	// inserted SENT was not touched.
	if n := dropinCount(t, db, "SELECT COUNT(*) FROM producer_message WHERE version = 1"); n != 3 {
		t.Fatalf("%d rows have version 1, want 3", n)
	}
}

// checkLocalMessage is TestPresets for the local-message preset.
func checkLocalMessage(t *testing.T, db *testenv.DB, br *testenv.Broker, got *testenv.Collector) {
	db.Exec(t, `INSERT INTO local_message (biz_id, biz_type, exchange, routing_key, message_body, status) VALUES
		('lm-1', 'order', ?, 'ignored', '{"n":1}', 0),
		('lm-2', 'refund', ?, 'ignored', '{"n":2}', 1),
		('lm-3', 'invoice', ?, 'ignored', '{"n":3}', 0)`, br.Exchange, br.Exchange, br.Exchange)
	msgs := dropinWait(t, got, 2, 20*time.Second)
	// The message id is the row id; biz_id and biz_type are headers.
	for i, w := range []struct{ id, bizID, rk, typ string }{{"1", "lm-1", "order.0", "order"}, {"3", "lm-3", "invoice.0", "invoice"}} {
		m := msgs[i]
		if m.MessageID != w.id || m.RoutingKey != w.rk {
			t.Fatalf("message %d: %s rk %s, want %s rk %s", i, m.MessageID, m.RoutingKey, w.id, w.rk)
		}
		if h, _ := dropinHeader(m, "biz_type"); h != w.typ {
			t.Fatalf("message %d: header biz_type %q, want %q", i, h, w.typ)
		}
		if h, _ := dropinHeader(m, "biz_id"); h != w.bizID {
			t.Fatalf("message %d: header biz_id %q, want %q", i, h, w.bizID)
		}
	}
	dropinEventuallyCount(t, db, 3, "SELECT COUNT(*) FROM local_message WHERE status = 1")
}

// checkMessageRecord is TestPresets for the message-record preset.
func checkMessageRecord(t *testing.T, db *testenv.DB, br *testenv.Broker, got *testenv.Collector) {
	db.Exec(t, `INSERT INTO t_message_record (message_id, topic, tag, message_body) VALUES
		('mr-1', ?, 'TagA', 'body one'), ('mr-2', ?, 'TagB', 'body two')`, br.Exchange, br.Exchange)
	msgs := dropinWait(t, got, 2, 20*time.Second)
	for i, w := range []struct{ id, tag, body string }{{"mr-1", "TagA", "body one"}, {"mr-2", "TagB", "body two"}} {
		m := msgs[i]
		if m.MessageID != w.id || m.Exchange != br.Exchange || m.RoutingKey != w.tag || string(m.Body) != w.body {
			t.Fatalf("message %d: %s %s/%s %q", i, m.MessageID, m.Exchange, m.RoutingKey, m.Body)
		}
		if h, _ := dropinHeader(m, "topic"); h != br.Exchange {
			t.Fatalf("message %d: header topic %q", i, h)
		}
		if h, _ := dropinHeader(m, "tag"); h != w.tag {
			t.Fatalf("message %d: header tag %q", i, h)
		}
	}
	dropinEventuallyCount(t, db, 2, "SELECT COUNT(*) FROM t_message_record WHERE status = 'SENT'")
}

// checkDebezium is TestPresets for the debezium preset.
func checkDebezium(t *testing.T, db *testenv.DB, br *testenv.Broker, got *testenv.Collector) {
	ids := []string{"6f1c1d58-6b0e-4a57-9d7c-0a3c1b1e0001", "6f1c1d58-6b0e-4a57-9d7c-0a3c1b1e0002", "6f1c1d58-6b0e-4a57-9d7c-0a3c1b1e0003"}
	db.Exec(t, `INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload) VALUES
		(?, 'Order', 'o-17', 'OrderCreated', '{"id":"o-17","total":12.5}'),
		(?, 'Customer', 'c-4', 'CustomerRenamed', '{"name":"Zoë 佐藤 🚀"}'),
		(?, ?, 'x-1', 'Direct', '{"via":"template"}')`, ids[0], ids[1], ids[2], br.Exchange)
	msgs := dropinWait(t, got, 3, 20*time.Second)
	want := []struct{ rk, aggID, body string }{
		{"OrderCreated", "o-17", `{"id":"o-17","total":12.5}`},
		{"CustomerRenamed", "c-4", `{"name":"Zoë 佐藤 🚀"}`},
		{"Direct", "x-1", `{"via":"template"}`},
	}
	for i := range want {
		want[i].body = asStored(t, db, "outbox", "id", ids[i], want[i].body)
	}
	for i, w := range want {
		m := msgs[i]
		if m.MessageID != ids[i] || m.Exchange != br.Exchange || m.RoutingKey != w.rk || string(m.Body) != w.body {
			t.Fatalf("message %d: %s %s/%s %q", i, m.MessageID, m.Exchange, m.RoutingKey, m.Body)
		}
		if h, _ := dropinHeader(m, "aggregateid"); h != w.aggID {
			t.Fatalf("message %d: header aggregateid %q, want %q", i, h, w.aggID)
		}
	}
	// No status column: nothing is written back.
	if n := dropinCount(t, db, "SELECT COUNT(*) FROM outbox"); n != 3 {
		t.Fatalf("outbox has %d rows, want 3", n)
	}
}

// checkEventuate is TestPresets for the eventuate preset.
func checkEventuate(t *testing.T, db *testenv.DB, br *testenv.Broker, got *testenv.Collector) {
	ids := []string{"0000018c2f1a7b3e-0242ac1100020000", "0000018c2f1a7b3f-0242ac1100020000"}
	for i, id := range ids {
		hdrs := fmt.Sprintf(`{"ID":%q,"DESTINATION":%q,"PARTITION_ID":"%d","event-aggregate-type":"Order"}`, id, br.Exchange, i)
		db.Exec(t, `INSERT INTO message (id, destination, headers, payload, published, creation_time)
			VALUES (?, ?, ?, ?, 0, ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000))`, id, br.Exchange, hdrs, fmt.Sprintf(`{"seq":%d}`, i))
	}
	// published=1 at insert: already sent, not the relay's.
	db.Exec(t, `INSERT INTO message (id, destination, headers, payload, published) VALUES ('old', ?, '{}', '{}', 1)`, br.Exchange)
	msgs := dropinWait(t, got, 2, 20*time.Second)
	for i, id := range ids {
		m := msgs[i]
		// eventuate.envelope, on in the preset: the body is Eventuate's message JSON.
		body := fmt.Sprintf(`{"payload":"{\"seq\":%d}","headers":{"DESTINATION":%q,"ID":%q,"PARTITION_ID":"%d","event-aggregate-type":"Order"}}`,
			i, br.Exchange, id, i)
		if m.MessageID != id || m.Exchange != br.Exchange || m.RoutingKey != br.Exchange || string(m.Body) != body {
			t.Fatalf("message %d: %s %s/%s %q", i, m.MessageID, m.Exchange, m.RoutingKey, m.Body)
		}
		// route.expand_headers: the JSON object became AMQP headers.
		if h, _ := dropinHeader(m, "ID"); h != id {
			t.Fatalf("message %d: header ID %q, want %q (headers %v)", i, h, id, m.Headers)
		}
		if h, _ := dropinHeader(m, "PARTITION_ID"); h != strconv.Itoa(i) {
			t.Fatalf("message %d: header PARTITION_ID %q (headers %v)", i, h, m.Headers)
		}
		if _, raw := m.Headers["headers"]; raw {
			t.Fatalf("message %d: the headers JSON was copied as one header, not expanded", i)
		}
	}
	dropinEventuallyCount(t, db, 3, "SELECT COUNT(*) FROM message WHERE published = 1")
}

// Test 2: three outbox tables in two databases, each with its own mapping,
// written interleaved in the same transactions: every row arrives once, in
// commit order, routed by its own table's mapping; rolled-back rows never do;
// and the checkpoint moves past all of it.
func TestInterleavedTablesTwoDatabases(t *testing.T) {
	testenv.Integration(t)
	dbA := testenv.NewDB(t, "schema/producer_message.sql", "schema/local_message.sql")
	dbB := testenv.NewDB(t, "schema/message_record.sql")
	br, got := testenv.NewCollectedBroker(t)
	r := startDropin(t, fmt.Sprintf(`  - {preset: producer-message, schema: %[1]s}
  - preset: local-message
    schema: %[1]s
    route: {routing_key: "local.{biz_type}"}
  - preset: message-record
    schema: %[2]s
    route: {exchange: %[3]s, routing_key: "record.{tag}"}
`, dbA.Name, dbB.Name, br.Exchange))

	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DROPIN_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("random seed %d (set DROPIN_SEED to replay)", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	type expect struct{ table, id, rk, body string }
	var want []expect
	conn, err := dbA.Primary.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	const txs = 300
	n := 0
	for i := 0; i < txs; i++ {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var rows []expect
		for j := 0; j < 1+rng.IntN(6); j++ {
			n++
			body := fmt.Sprintf(`{"tx":%d,"row":%d}`, i, j)
			var e expect
			var q string
			var args []any
			switch rng.IntN(3) {
			case 0:
				e = expect{"pm", fmt.Sprintf("pm-%05d", n), "pm.rk", body}
				q, args = "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'pm.rk', ?)", []any{e.id, br.Exchange, body}
			case 1:
				e = expect{"lm", fmt.Sprintf("lm-%05d", n), "local.kind", body}
				q, args = "INSERT INTO local_message (biz_id, biz_type, exchange, message_body) VALUES (?, 'kind', ?, ?)", []any{e.id, br.Exchange, body}
			default:
				e = expect{"mr", fmt.Sprintf("mr-%05d", n), "record.tg", body}
				q = fmt.Sprintf("INSERT INTO `%s`.t_message_record (message_id, topic, tag, message_body) VALUES (?, 'unused-topic', 'tg', ?)", dbB.Name)
				args = []any{e.id, body}
			}
			res, err := tx.ExecContext(ctx, q, args...)
			if err != nil {
				// Rolled back first: the deferred conn.Close waits for an
				// open transaction, so a Fatal with one open hangs the test.
				_ = tx.Rollback()
				t.Fatalf("insert (transaction %d): %v", i, err)
			}
			if e.table == "lm" {
				// local-message publishes the row id as the message id
				// (biz_id is shared by the events of one business object).
				id, _ := res.LastInsertId()
				e.id = strconv.FormatInt(id, 10)
			}
			rows = append(rows, e)
		}
		if i%17 == 16 {
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		want = append(want, rows...)
	}
	lastGTID := primaryGTID(t, dbA)

	msgs := dropinWait(t, got, len(want), 60*time.Second)
	for i, w := range want {
		m := msgs[i]
		if m.MessageID != w.id || m.RoutingKey != w.rk || string(m.Body) != w.body || m.Exchange != br.Exchange {
			t.Fatalf("message %d: %s %s/%s %q, want %s %s/%s %q (commit order or routing broken)",
				i, m.MessageID, m.Exchange, m.RoutingKey, m.Body, w.id, br.Exchange, w.rk, w.body)
		}
	}
	var pm, lm, mr int
	for _, w := range want {
		switch w.table {
		case "pm":
			pm++
		case "lm":
			lm++
		default:
			mr++
		}
	}
	t.Logf("%d rows in %d tables over 2 databases: %d/%d/%d", len(want), 3, pm, lm, mr)
	dropinEventuallyCount(t, dbA, pm, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT'")
	dropinEventuallyCount(t, dbA, lm, "SELECT COUNT(*) FROM local_message WHERE status = 1")
	dropinEventuallyCount(t, dbA, mr, fmt.Sprintf("SELECT COUNT(*) FROM `%s`.t_message_record WHERE status = 'SENT'", dbB.Name))
	if n := dropinCount(t, dbA, "SELECT COUNT(*) FROM producer_message WHERE status <> 'SENT'") +
		dropinCount(t, dbA, "SELECT COUNT(*) FROM local_message WHERE status <> 1"); n != 0 {
		t.Fatalf("%d rows not SENT", n)
	}

	// One checkpoint covers all three tables: it reaches the last commit.
	testenv.Eventually(t, 10*time.Second, func() bool {
		cp, ok := r.App.Relay().LastCheckpoint()
		if !ok {
			return false
		}
		covers, err := binlog.ContainsGTID(cp.Flavor, cp.GTIDSet, lastGTID)
		return err == nil && covers
	}, "checkpoint did not reach the last commit %s", lastGTID)
}

// Test 3: ALTER TABLE adding, dropping and moving columns of an outbox
// table while 20,000 rows are written around them: every row arrives with
// exactly the payload and routing key it was written with, in order.
func TestAlterTableWhileStreaming(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	// A column that exists before and is dropped halfway.
	db.Exec(t, "ALTER TABLE producer_message ADD COLUMN legacy_note VARCHAR(32) NOT NULL DEFAULT 'legacy' AFTER routing_key")
	db.WaitReplicated(t, 30*time.Second) // the relay reads the table on the replica
	br, got := testenv.NewCollectedBroker(t)
	cfg := relaytest.RelayConfig(testenv.UniqueName("alter"),
		fmt.Sprintf("  - {preset: producer-message, schema: %s, columns: {headers: [message_id]}}\n", db.Name), "")
	r := relaytest.StartRelay(t, cfg)

	const total, perTx = 20000, 50
	alters := []struct {
		at  int64
		ddl string
	}{
		// New column in front of every mapped one: all positions shift.
		{5000, "ALTER TABLE producer_message ADD COLUMN tenant VARCHAR(16) NOT NULL DEFAULT 't1' AFTER id"},
		// Drop a column between mapped ones.
		{10000, "ALTER TABLE producer_message DROP COLUMN legacy_note"},
		// Move mapped columns: routing_key after content, exchange first.
		{15000, "ALTER TABLE producer_message MODIFY COLUMN routing_key VARCHAR(255) NOT NULL DEFAULT '' AFTER content, MODIFY COLUMN exchange VARCHAR(255) NOT NULL FIRST"},
	}
	var written atomic.Int64
	writeErr := make(chan error, 1)
	go func() {
		writeErr <- func() error {
			for i := 0; i < total/perTx; i++ {
				stmt := outboxInsert(i*perTx, (i+1)*perTx, func(k int) string {
					return fmt.Sprintf("('alt-%05d', '%s', 'rk.%05d.%d', '{\"k\":%d,\"s\":\"%s\"}')", k, br.Exchange, k, k%7, k, strings.Repeat("é", k%13))
				})
				if _, err := db.Primary.Exec(stmt); err != nil {
					return fmt.Errorf("insert batch %d: %w", i, err)
				}
				written.Add(perTx)
			}
			return nil
		}()
	}()
	// The ALTERs run on their own connection while the writer goes on.
	for _, a := range alters {
		testenv.Eventually(t, 60*time.Second, func() bool { return written.Load() >= a.at }, "writer reached %d of %d", written.Load(), a.at)
		start := time.Now()
		db.Exec(t, a.ddl)
		t.Logf("at ~%d rows (%d written when done, %s): %s", a.at, written.Load(), time.Since(start).Round(time.Millisecond), a.ddl)
	}
	if err := <-writeErr; err != nil {
		t.Fatal(err)
	}

	msgs := dropinWait(t, got, total, 90*time.Second)
	for k, m := range msgs {
		id := fmt.Sprintf("alt-%05d", k)
		rk := fmt.Sprintf("rk.%05d.%d", k, k%7)
		body := fmt.Sprintf(`{"k":%d,"s":"%s"}`, k, strings.Repeat("é", k%13))
		if m.MessageID != id || m.RoutingKey != rk || string(m.Body) != body || m.Exchange != br.Exchange {
			t.Fatalf("message %d: %s %s/%s %q, want %s %s/%s %q", k, m.MessageID, m.Exchange, m.RoutingKey, m.Body, id, br.Exchange, rk, body)
		}
		if h, _ := dropinHeader(m, "message_id"); h != id {
			t.Fatalf("message %d: header message_id %q, want %q", k, h, id)
		}
	}
	dropinEventuallyCount(t, db, total, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT' AND version = 1")

	// Rows written before an ALTER are decoded with the layout they were
	// written with even when the relay reads them after the ALTER: with the
	// relay stopped, rows go in, the columns move, more rows go in; the
	// restarted relay resumes from its checkpoint and gets all of them right.
	if err := r.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	insert := func(from, to int) {
		for k := from; k < to; k++ {
			db.Exec(t, "INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, ?, ?)",
				fmt.Sprintf("late-%05d", k), br.Exchange, fmt.Sprintf("late.%05d", k), fmt.Sprintf(`{"late":%d}`, k))
		}
	}
	insert(0, 300)
	db.Exec(t, "ALTER TABLE producer_message MODIFY COLUMN content LONGTEXT NOT NULL FIRST, ADD COLUMN extra INT NOT NULL DEFAULT 7 AFTER content, DROP COLUMN tenant")
	insert(300, 600)
	db.WaitReplicated(t, 30*time.Second)
	relaytest.StartRelay(t, cfg)
	msgs = dropinWait(t, got, total+600, 60*time.Second)
	for k, m := range msgs[total:] {
		id, rk, body := fmt.Sprintf("late-%05d", k), fmt.Sprintf("late.%05d", k), fmt.Sprintf(`{"late":%d}`, k)
		if m.MessageID != id || m.RoutingKey != rk || string(m.Body) != body {
			t.Fatalf("late message %d: %s %s %q, want %s %s %q", k, m.MessageID, m.RoutingKey, m.Body, id, rk, body)
		}
	}
	dropinEventuallyCount(t, db, total+600, "SELECT COUNT(*) FROM producer_message WHERE status = 'SENT' AND version = 1")
}

// Without column names in the binlog the reader falls back to
// information_schema on the source (the decoding itself is unit-tested in
// pkg/binlog with synthetic table maps, as the replica's
// binlog_row_metadata is global and stays FULL for the other tests). This
// checks the real schema read: names in order, types, UNSIGNED, ENUM values,
// and a fresh read after an ALTER once the cached one is forgotten.
func TestAlterFallbackSchemaSource(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t)
	db.Exec(t, "CREATE TABLE ob (id BIGINT UNSIGNED NOT NULL PRIMARY KEY, state ENUM('PENDING','SENT','it''s') NOT NULL, body LONGTEXT, at DATETIME(3))")
	db.WaitReplicated(t, 30*time.Second)
	src := &binlog.InfoSchema{DB: db.Replica}
	ctx := context.Background()
	cols, err := src.Columns(ctx, db.Name, "ob")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cols {
		got = append(got, fmt.Sprintf("%s:%s:%v:%s", c.Name, c.DataType, c.Unsigned, strings.Join(c.Enum, "|")))
	}
	want := "id:bigint:true: state:enum:false:PENDING|SENT|it's body:longtext:false: at:datetime:false:"
	if strings.Join(got, " ") != want {
		t.Fatalf("columns %q, want %q", strings.Join(got, " "), want)
	}
	db.Exec(t, "ALTER TABLE ob ADD COLUMN tenant INT FIRST, MODIFY body LONGTEXT AFTER id")
	db.WaitReplicated(t, 30*time.Second)
	if again, _ := src.Columns(ctx, db.Name, "ob"); len(again) != 4 {
		t.Fatalf("cached read changed before Forget: %v", again)
	}
	src.Forget(db.Name, "ob")
	cols, err = src.Columns(ctx, db.Name, "ob")
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, c := range cols {
		got = append(got, c.Name)
	}
	if strings.Join(got, ",") != "tenant,id,body,state,at" {
		t.Fatalf("after ALTER: %v", got)
	}
}

// Test 4 (with the type handling): payloads in TEXT, JSON, BLOB and VARCHAR
// columns published byte for byte (1 MB JSON, every byte value, 4-byte
// UTF-8, empty); BIGINT UNSIGNED ids above 2^63 marked SENT; NULL in an
// optional header column leaves the header out; DATETIME and TIMESTAMP
// headers rendered in the configured zone.
func TestPayloadsByteForByte(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t)
	cols := "id BIGINT UNSIGNED NOT NULL, kind VARCHAR(32) NOT NULL, status VARCHAR(16) NOT NULL DEFAULT 'PENDING', " +
		"note VARCHAR(64) NULL, created DATETIME(3) NULL, stamp TIMESTAMP(3) NULL, PRIMARY KEY (id)"
	for name, payload := range map[string]string{
		"p_text":    "payload LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL",
		"p_json":    "payload JSON NOT NULL",
		"p_blob":    "payload LONGBLOB NOT NULL",
		"p_varchar": "payload VARCHAR(2000) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL",
	} {
		db.Exec(t, fmt.Sprintf("CREATE TABLE %s (%s, %s) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4", name, cols, payload))
	}
	db.WaitReplicated(t, 30*time.Second)
	br, got := testenv.NewCollectedBroker(t)
	var tables strings.Builder
	for _, name := range []string{"p_text", "p_json", "p_blob", "p_varchar"} {
		zone := "UTC"
		if name == "p_text" {
			zone = "Asia/Shanghai"
		}
		fmt.Fprintf(&tables, `  - schema: %s
    name: %s
    columns: {id: id, payload: payload, status: status, headers: [note, created, stamp]}
    statuses: {pending: PENDING, sent: SENT, failed: FAILED, publishable: [PENDING]}
    route: {exchange: %s, routing_key: "%s.{kind}", time_zone: %s, content_type: application/octet-stream}
`, db.Name, name, br.Exchange, name, zone)
	}
	startDropin(t, tables.String())

	bigJSON := func() []byte {
		var b bytes.Buffer
		b.WriteString(`{"items":[`)
		for i := 0; b.Len() < 1<<20; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"i":%d,"name":"item %d — ✓ 商品 🛒","tags":["a","b"],"n":%d.5}`, i, i, i)
		}
		b.WriteString(`]}`)
		return b.Bytes()
	}()
	allBytes := make([]byte, 0, 4096)
	for i := 0; i < 16; i++ {
		for c := 0; c < 256; c++ {
			allBytes = append(allBytes, byte(c))
		}
	}
	utf8mb4 := []byte("emoji 😀🚀👩‍👩‍👧, CJK 漢字かなカナ한국어, 𝄞 𠜎𠜱")
	const maxU64 = uint64(18446744073709551615)
	type row struct {
		table string
		id    uint64
		kind  string
		body  []byte
	}
	rows := []row{
		{"p_text", 1, "big", bigJSON},
		{"p_text", 2, "utf8", utf8mb4},
		{"p_text", 3, "empty", []byte{}},
		{"p_json", 1, "big", bigJSON},
		{"p_json", 2, "utf8", []byte(`{"s":"` + string(utf8mb4) + `"}`)},
		{"p_blob", maxU64, "bytes", allBytes},
		{"p_blob", maxU64 - 1, "utf8", utf8mb4},
		{"p_blob", 1 << 63, "empty", []byte{}},
		{"p_varchar", 1, "utf8", utf8mb4},
		{"p_varchar", 2, "empty", []byte{}},
	}
	tx, err := db.Primary.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }() // a failed insert must not hold the tables (DROP DATABASE would wait)
	// TIMESTAMP literals are read in the session zone: pin it.
	if _, err := tx.Exec("SET time_zone = '+00:00'"); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		var note any
		if i%2 == 0 {
			note = fmt.Sprintf("note-%d", i)
		}
		q := fmt.Sprintf("INSERT INTO %s (id, kind, payload, note, created, stamp) VALUES (?, ?, ?, ?, '2024-02-29 23:59:58.123', '2024-02-29 15:59:58.123')", r.table)
		var body any = r.body
		if r.table == "p_json" {
			body = string(r.body) // MySQL makes no JSON of a binary string
		}
		if _, err := tx.Exec(q, r.id, r.kind, body, note); err != nil {
			t.Fatalf("insert %s %d: %v", r.table, r.id, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	msgs := dropinWait(t, got, len(rows), 30*time.Second)
	for i, r := range rows {
		m := msgs[i]
		wantID := fmt.Sprintf("%s.%s:%d", db.Name, r.table, r.id)
		if m.MessageID != wantID || m.RoutingKey != r.table+"."+r.kind {
			t.Fatalf("message %d: %s rk %s, want %s rk %s.%s", i, m.MessageID, m.RoutingKey, wantID, r.table, r.kind)
		}
		if r.table == "p_json" {
			r.body = []byte(asStored(t, db, r.table, "id", r.id, string(r.body)))
		}
		if !bytes.Equal(m.Body, r.body) {
			t.Fatalf("message %d (%s %s): body of %d bytes (sha256 %x) differs from the %d bytes written (sha256 %x)",
				i, r.table, r.kind, len(m.Body), sha256.Sum256(m.Body), len(r.body), sha256.Sum256(r.body))
		}
		note, hasNote := dropinHeader(m, "note")
		if wantNote := i%2 == 0; hasNote != wantNote || (wantNote && note != fmt.Sprintf("note-%d", i)) {
			t.Fatalf("message %d: header note %q (present %v), want present=%v", i, note, hasNote, wantNote)
		}
		wantCreated, wantStamp := "2024-02-29T23:59:58.123Z", "2024-02-29T15:59:58.123Z"
		if r.table == "p_text" {
			// DATETIME read as Shanghai wall-clock time; the TIMESTAMP
			// instant shown in Shanghai time.
			wantCreated, wantStamp = "2024-02-29T23:59:58.123+08:00", "2024-02-29T23:59:58.123+08:00"
		}
		if h, _ := dropinHeader(m, "created"); h != wantCreated {
			t.Fatalf("message %d: header created %q, want %q", i, h, wantCreated)
		}
		if h, _ := dropinHeader(m, "stamp"); h != wantStamp {
			t.Fatalf("message %d: header stamp %q, want %q", i, h, wantStamp)
		}
	}
	for _, name := range []string{"p_text", "p_json", "p_blob", "p_varchar"} {
		var n int
		for _, r := range rows {
			if r.table == name {
				n++
			}
		}
		dropinEventuallyCount(t, db, n, fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE status = 'SENT'", name))
	}
}

// Test 5: every invalid config is refused with a message naming the field:
// before connecting (config.Parse) for unknown keys, bad identifiers,
// unknown presets and bad values; at the start-up check for a mapped column
// the table lacks.
func TestConfigErrorsNameTheField(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	cfgFor := func(tables, extra string) string {
		return relaytest.RelayConfig(testenv.UniqueName("cfg"), tables, extra)
	}
	for _, c := range []struct {
		name, tables, extra, want string
	}{
		{"unknown top-level key", "  - {preset: producer-message, schema: x}\n", "bogus_section: {a: 1}\n", "bogus_section: unknown key"},
		{"unknown table key", "  - {preset: producer-message, schema: x, colums: {id: id}}\n", "", "tables[0].colums: unknown key"},
		{"unknown column key", "  - {preset: producer-message, schema: x, columns: {routing_ky: rk}}\n", "", "tables[0].columns.routing_ky: unknown key"},
		{"unknown route key", "  - {preset: debezium, schema: x, route: {exchange_mapp: {a: b}}}\n", "", "tables[0].route.exchange_mapp: unknown key"},
		{"bad identifier", "  - {preset: producer-message, schema: x, columns: {routing_key: \"rk`; DROP TABLE t; --\"}}\n", "", "tables[0].columns.routing_key"},
		{"bad schema name", "  - {preset: producer-message, schema: \"my-db\"}\n", "", "tables[0].schema"},
		{"bad template", "  - {preset: producer-message, schema: x, route: {routing_key: \"{biz-type}.x\"}}\n", "", "tables[0].route.routing_key"},
		{"unknown preset", "  - {preset: kafka-connect, schema: x}\n", "", "tables[0].preset: unknown preset \"kafka-connect\""},
		{"second table", "  - {preset: producer-message, schema: x}\n  - {preset: eventuate, schema: x, statuses: {sent: yes}}\n", "", "tables[1].statuses.sent"},
		{"bad zone", "  - {preset: producer-message, schema: x, route: {time_zone: Mars/Olympus}}\n", "", "tables[0].route.time_zone"},
	} {
		_, err := config.Parse([]byte(cfgFor(c.tables, c.extra)), os.LookupEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}

	// A mapped column the table lacks: the config is well-formed, so the
	// start-up check (which connects) names the field and the column.
	a := relaytest.OpenApp(t, cfgFor(fmt.Sprintf("  - {preset: producer-message, schema: %s, columns: {routing_key: route_key}}\n", db.Name), ""))
	var lines []string
	for _, p := range a.Check(context.Background()) {
		lines = append(lines, p.String())
	}
	found := false
	for _, l := range lines {
		if strings.Contains(l, "ERROR") && strings.Contains(l, `no column "route_key"`) && strings.Contains(l, "columns.routing_key") {
			found = true
		}
	}
	if !found {
		t.Fatalf("start-up check did not name columns.routing_key; it said:\n%s", strings.Join(lines, "\n"))
	}
	// And the relay refuses to start on it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Run(ctx); err == nil || !strings.Contains(err.Error(), "columns.routing_key") {
		t.Fatalf("Run: %v, want a start-up failure naming columns.routing_key", err)
	}
}

// asStored is what the server returns for a JSON column written as
// written: the text itself on MariaDB (JSON is LONGTEXT there, and a
// message carries it byte for byte), MySQL's rendering of its binary JSON
// on MySQL ({"a": 1}, with its spacing and key order), which is what the
// binlog holds and so what a message carries.
func asStored(t *testing.T, db *testenv.DB, table, idCol string, id any, written string) string {
	t.Helper()
	if !testenv.Current.MySQL {
		return written
	}
	var v string
	if err := db.Primary.QueryRow(fmt.Sprintf("SELECT CAST(payload AS CHAR) FROM `%s` WHERE `%s` = ?", table, idCol), id).Scan(&v); err != nil {
		t.Fatalf("reading %s %v back: %v", table, id, err)
	}
	return v
}
