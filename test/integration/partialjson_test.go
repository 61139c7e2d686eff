package integration

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// partialJSONUpdates are the JSON changes each transaction makes after its
// INSERT, cycled through: one diff or several per statement (JSON_SET with
// two paths logs two), members and array elements, nested paths, a quoted
// key, a value that is an object, removals, and 4-byte UTF-8.
var partialJSONUpdates = [][]string{
	{`JSON_SET(content, '$.state', 'committed')`},
	{`JSON_SET(content, '$.state', 'paid', '$.total', 12.5)`},
	{`JSON_REPLACE(content, '$.items[1]', 7)`, `JSON_REMOVE(content, '$.note')`},
	{`JSON_SET(content, '$.customer.name', 'Zoë 😀', '$.customer.tier', 3)`},
	{`JSON_SET(content, '$."a key"', JSON_OBJECT('b', 1, 'aa', 2))`},
	{`JSON_REMOVE(content, '$.items[0]')`, `JSON_SET(content, '$.items[5]', 'appended')`},
	{`JSON_SET(content, '$.state', 'x')`, `JSON_SET(content, '$.state', 'committed at last')`},
}

// With binlog_row_value_options=PARTIAL_JSON (set here per session, as an
// application may), MySQL logs an UPDATE of a JSON column by JSON_SET,
// JSON_REPLACE or JSON_REMOVE as diffs against the row's before image.
// Fifty transactions each INSERT an outbox row with a JSON body and then
// change it so: every message carries the committed document, byte for
// byte as MySQL prints the column, never the draft. A later transaction
// that puts a SENT row back to PENDING and changes its body the same way
// (a re-queue) is published again with its new body.
func TestPartialJSONUpdatesPublishTheCommittedDocument(t *testing.T) {
	testenv.Integration(t)
	testenv.Only(t, true, "binlog_row_value_options is MySQL's")
	db := testenv.NewDB(t, "schema/producer_message.sql")
	db.Exec(t, "ALTER TABLE producer_message MODIFY content JSON NOT NULL")
	br, got := testenv.NewCollectedBroker(t)
	// The relay reads the primary's binlog: a replica applies partial
	// updates but logs whole rows unless its own global setting says
	// PARTIAL_JSON (which a test must not change on the shared stack).
	ph, pp := testenv.HostPort(testenv.PrimaryDSN)
	relaytest.StartRelay(t, relaytest.Config{Name: testenv.UniqueName("partial-json"), Tables: relaytest.SeedTable(db.Name),
		Sections: map[string]string{"source": fmt.Sprintf("{host: %s, port: %d, user: root}", ph, pp), "sweeper": "{enabled: false}"}}.YAML())

	ctx := context.Background()
	conn, err := db.Primary.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("SET SESSION binlog_row_value_options = 'PARTIAL_JSON'")
	var ids []string
	for i := range 50 {
		id := fmt.Sprintf("pj-%02d", i)
		ids = append(ids, id)
		exec("BEGIN")
		exec(`INSERT INTO producer_message (message_id, exchange, routing_key, content) VALUES (?, ?, 'order.created',
			JSON_OBJECT('order', ?, 'state', 'draft', 'items', JSON_ARRAY(1, 2, 3), 'note', 'draft note', 'customer', JSON_OBJECT('id', ?)))`,
			id, br.Exchange, i, i)
		for _, set := range partialJSONUpdates[i%len(partialJSONUpdates)] {
			exec("UPDATE producer_message SET content = "+set+" WHERE message_id = ?", id)
		}
		exec("COMMIT")
	}
	waitDeliveredOnceInOrder(t, got, ids, 30*time.Second)
	bodies := committedBodies(t, db.Primary)
	for _, d := range got.All() {
		if want := bodies[d.MessageID]; string(d.Body) != want {
			t.Errorf("%s: published %s\n want the committed %s", d.MessageID, d.Body, want)
		}
	}

	// A re-queue: SENT back to PENDING with its body changed by diffs.
	testenv.WaitFor(t, 15*time.Second, "every row SENT", func() (bool, string) {
		n := pendingIn(t, db, "producer_message")
		return n == 0, fmt.Sprintf("%d not SENT", n)
	})
	exec(`UPDATE producer_message SET status = 'PENDING', content = JSON_SET(content, '$.state', 'requeued', '$.attempt', 2) WHERE message_id = 'pj-07'`)
	testenv.WaitFor(t, 15*time.Second, "the re-queued row published again", func() (bool, string) {
		return got.Len() == len(ids)+1, fmt.Sprintf("%d messages", got.Len())
	})
	last := got.All()[len(ids)]
	if want := committedBodies(t, db.Primary)["pj-07"]; last.MessageID != "pj-07" || string(last.Body) != want {
		t.Fatalf("re-queue published %s %s\n want pj-07 %s", last.MessageID, last.Body, want)
	}
}

// committedBodies reads each row's content as MySQL prints it.
func committedBodies(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.Query("SELECT message_id, content FROM producer_message")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, body string
		if err := rows.Scan(&id, &body); err != nil {
			t.Fatal(err)
		}
		out[id] = body
	}
	return out
}
