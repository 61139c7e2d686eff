package integration

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/command"

	"github.com/binlog-relay/binlog-relay/internal/reconcile"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/relaytest"
)

// Reconcile walks every table in key ranges of reconcile.chunk_size rows:
// findings at the edges of the ranges, snowflake ids above 2^53, UUID keys,
// integer message ids, ids of the form schema.table:id, and rows outside
// the window are all judged exactly. Three outbox tables
// and their consumers share one pkg/inbox table told apart by consumer;
// nothing is published, the rows are written as they would stand.
func TestReconcileChunksAndKeys(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql", "schema/local_message.sql", "schema/consumer_message.sql")
	db.Exec(t, `CREATE TABLE events (id CHAR(36) NOT NULL PRIMARY KEY, body TEXT NOT NULL, state VARCHAR(8) NOT NULL,
		created DATETIME(3) NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`)
	// A duplicate needs the inbox's unique key gone.
	db.Exec(t, "ALTER TABLE consumer_message DROP INDEX uk_consumer_message_id, ADD INDEX idx_cm (consumer, message_id)")
	db.WaitReplicated(t, 30*time.Second) // the relay reads the table on the replica
	inbox := func(consumer, id, ago string) {
		db.Exec(t, "INSERT INTO consumer_message (consumer, message_id, status, content, first_consume_time) VALUES (?, ?, 'SUCCESS', '', NOW(3) - INTERVAL "+ago+")", consumer, id)
	}

	// producer_message: 1,050 snowflake ids with gaps, the first 50 created
	// three days ago (outside the 24h window).
	const pm = 1050
	missingPM := map[int]bool{99: true, 100: true, 101: true, 499: true, pm - 1: true}
	var want []string
	for i := 0; i < pm; i++ {
		id := uint64(1811234567890000000) + uint64(i)*4096 + uint64(i%3)
		msg := fmt.Sprintf("s-%04d", i)
		ago := "1 HOUR"
		if i < 50 {
			ago = "3 DAY"
		}
		db.Exec(t, "INSERT INTO producer_message (id, message_id, exchange, content, status, create_time, update_time) VALUES (?, ?, 'ex', '{}', 'SENT', NOW(3) - INTERVAL "+ago+", NOW(3) - INTERVAL "+ago+")", id, msg)
		switch {
		case missingPM[i]:
			want = append(want, msg)
		case i == 49:
			inbox("inv", msg, "10 MINUTE") // consumed now, created before the window: explained
		case i < 50:
			inbox("inv", msg, "3 DAY")
		default:
			inbox("inv", msg, "50 MINUTE")
		}
	}
	inbox("inv", "s-0200", "40 MINUTE") // processed twice
	inbox("inv", "o-1", "30 MINUTE")    // no outbox row
	inbox("inv", "s-0002", "2 DAY")     // processed twice, but not in the window

	// local_message: the message id is the row id.
	for i := 1; i <= 250; i++ {
		db.Exec(t, "INSERT INTO local_message (id, biz_id, biz_type, exchange, message_body, status, created_at, updated_at) VALUES (?, 'o', 'PAY', 'ex', '{}', 1, NOW(3) - INTERVAL 1 HOUR, NOW(3) - INTERVAL 1 HOUR)", i)
		if i != 100 && i != 201 {
			inbox("lm", fmt.Sprint(i), "50 MINUTE")
		}
	}
	inbox("lm", "999999", "30 MINUTE")
	inbox("lm", "12abc", "30 MINUTE")

	// events: UUID keys, no message id column; the rows at the 100th, 200th
	// and last key are missing.
	// A recursive CTE numbers the rows on both flavours (MariaDB's seq_1_to_N
	// is its own).
	db.Exec(t, "INSERT INTO events (id, body, state, created) WITH RECURSIVE seq (n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 300) SELECT UUID(), '{}', 'DONE', NOW(3) - INTERVAL 1 HOUR FROM seq")
	rows, err := db.Primary.Query("SELECT id FROM events ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		uuids = append(uuids, id)
	}
	rows.Close()
	// Without a message id column a row's message id is schema.table:id.
	var wantEv []string
	for i, id := range uuids {
		msg := db.Name + ".events:" + id
		if i == 99 || i == 199 || i == 299 {
			wantEv = append(wantEv, msg)
			continue
		}
		inbox("ev", msg, "50 MINUTE")
	}
	db.WaitReplicated(t, 30*time.Second)

	rh, rp := testenv.HostPort(testenv.ReplicaDSN)
	yaml := relaytest.RelayConfig(testenv.UniqueName("chunks"), fmt.Sprintf(`  - {preset: producer-message, schema: %[1]s}
  - {preset: local-message, schema: %[1]s}
  - {schema: %[1]s, name: events, columns: {id: id, payload: body, status: state, created_at: created},
     statuses: {pending: NEW, sent: DONE, publishable: [NEW]}, route: {exchange: ex}}
`, db.Name), fmt.Sprintf(`reconcile:
  chunk_size: 100
  grace_period: 1m
  max_ids: 1000
  consumers:
    - {name: inv, schema: %[1]s, mysql: {host: %[2]s, port: %[3]d, user: root}, tables: [%[1]s.producer_message]}
    - {name: lm, schema: %[1]s, mysql: {host: %[2]s, port: %[3]d, user: root}, tables: [%[1]s.local_message]}
    - {name: ev, schema: %[1]s, mysql: {host: %[2]s, port: %[3]d, user: root}, tables: [%[1]s.events]}
`, db.Name, rh, rp))
	a := relaytest.OpenApp(t, yaml)
	rep, err := command.Reconcile(context.Background(), a.Env(), command.ReconcileOptions{Format: "json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string, got reconcile.IDs, want ...string) {
		t.Helper()
		g := slices.Clone(got.IDs)
		slices.Sort(g)
		slices.Sort(want)
		if got.Count != int64(len(want)) || !slices.Equal(g, want) {
			t.Errorf("%s: %d %v, want %d %v", what, got.Count, g, len(want), want)
		}
	}
	byTable := map[string]*reconcile.TableReport{}
	for _, tr := range rep.Tables {
		byTable[strings.TrimPrefix(tr.Table, db.Name+".")] = tr
	}
	pmr, lmr, evr := byTable["producer_message"], byTable["local_message"], byTable["events"]
	if pmr.Rows != pm-50 || lmr.Rows != 250 || evr.Rows != 300 {
		t.Errorf("rows in the window: %d, %d, %d; want %d, 250, 300", pmr.Rows, lmr.Rows, evr.Rows, pm-50)
	}
	check("producer_message missing", pmr.Consumers[0].Missing, want...)
	check("producer_message duplicates", pmr.Consumers[0].Duplicates, "s-0200")
	check("local_message missing", lmr.Consumers[0].Missing, "100", "201")
	check("events missing", evr.Consumers[0].Missing, wantEv...)
	orphans := map[string]reconcile.IDs{}
	for _, c := range rep.Consumers {
		if c.Skipped != "" {
			t.Errorf("%s: %s", c.Consumer, c.Skipped)
		}
		orphans[c.Consumer] = c.Orphans
	}
	check("inv orphans", orphans["inv"], "o-1")
	check("lm orphans", orphans["lm"], "12abc", "999999")
	check("ev orphans", orphans["ev"])
	if want := int64(5 + 1 + 2 + 3 + 1 + 2); rep.Differences != want {
		t.Errorf("%d differences, want %d", rep.Differences, want)
	}

	// check reads each inbox with the columns a run reads: a consumer whose
	// table is not there is a warning naming it, the others pass.
	bad := strings.Replace(yaml, "    - {name: ev,", fmt.Sprintf("    - {name: gone, schema: %s, table: no_such_inbox, mysql: {host: %s, port: %d, user: root}}\n    - {name: ev,", db.Name, rh, rp), 1)
	lines := runCheck(t, bad)
	if !findLine(lines, "WARN reconcile", "reconcile.consumers[2] gone", "no_such_inbox") {
		t.Errorf("no warning about the missing inbox table in:\n%s", strings.Join(lines, "\n"))
	}
	for _, l := range lines {
		if strings.Contains(l, "reconcile") && !strings.Contains(l, "gone") {
			t.Errorf("a warning about a consumer whose inbox is fine: %s", l)
		}
	}
}
