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

// markBytes sums the rows events the primary logged for UPDATEs of
// schema's producer_message after file:pos (the SENT marks, in this test's
// database): Update_rows events after a Table_map naming it.
func markBytes(t *testing.T, db *sql.DB, schema, file string, pos int64) (bytes int64, events int) {
	t.Helper()
	rows, err := db.Query(fmt.Sprintf("SHOW BINLOG EVENTS IN '%s' FROM %d", file, pos))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	ours, open := false, int64(-1)
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		dest := make([]any, len(cols))
		for i := range vals {
			dest[i] = &vals[i]
		}
		if err := rows.Scan(dest...); err != nil {
			t.Fatal(err)
		}
		// Log_name, Pos, Event_type, Server_id, End_log_pos, Info
		// (an event's size is the next one's Pos minus its own: MariaDB
		// 11.8 shows End_log_pos 0 inside a transaction).
		typ, info := string(vals[2]), string(vals[5])
		var at int64
		fmt.Sscan(string(vals[1]), &at)
		if open >= 0 {
			bytes += at - open
			open = -1
		}
		switch {
		case typ == "Table_map":
			ours = strings.Contains(info, "("+schema+".producer_message)")
		case strings.HasPrefix(typ, "Update_rows") && ours:
			open = at
			events++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return bytes, events
}

// SENT marks logged with a minimal row image (relay.mark_row_image's
// default; the tests' primary user is root, which may set it): every row
// published is marked, the primary's binlog holds the marks without the
// payloads (a full image would log each 4 KiB payload twice per mark), and
// a re-queue after the marks is published again by the binlog path
// (invariant 11): the source replica re-logs the marks in full, and a mark
// never hides a re-queue.
func TestMinimalMarksLandWithoutPayloadAndARequeueIsPublished(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	br, got := testenv.NewCollectedBroker(t)
	file, pos := binlogAt(t, db.Primary)
	relaytest.StartRelay(t, relaytest.RelayConfig(testenv.UniqueName("minmarks"), relaytest.SeedTable(db.Name), noSweeper))

	const n = 40
	payload := strings.Repeat("x", 4096)
	db.Exec(t, outboxInsert(0, n, func(i int) string {
		return fmt.Sprintf("('mm-%03d', '%s', 'order.created', '{\"pad\":\"%s\"}')", i, br.Exchange, payload)
	}))
	waitReceived(t, got, n, 30*time.Second)
	testenv.Eventually(t, 20*time.Second, func() bool { return statusCounts(t, db.Primary)["SENT"] == n },
		"statuses %v", statusCounts(t, db.Primary))

	bytes, events := markBytes(t, db.Primary, db.Name, file, pos)
	t.Logf("%d mark events, %d bytes for %d rows (%.0f bytes per row)", events, bytes, n, float64(bytes)/n)
	if events == 0 || bytes > n*200 {
		t.Fatalf("the marks took %d bytes in %d events for %d rows of 4 KiB; want minimal images (under 200 bytes a row)", bytes, events, n)
	}

	db.Exec(t, "UPDATE producer_message SET status = 'PENDING', content = '{\"requeued\":1}' WHERE message_id = 'mm-007'")
	waitReceived(t, got, n+1, 30*time.Second)
	if last := got.All()[n]; last.MessageID != "mm-007" || string(last.Body) != `{"requeued":1}` {
		t.Fatalf("after the re-queue: %s %s; want mm-007 {\"requeued\":1}", last.MessageID, last.Body)
	}
	waitStatus(t, db, "mm-007", "SENT")
}

// check says which image the marks get: minimal for a primary user that may
// set binlog_row_image for its session, and, for one that may not, a
// warning naming the grant its flavour needs.
func TestCheckSaysTheMarksRowImage(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	yaml := relaytest.RelayConfig(testenv.UniqueName("chk"), relaytest.SeedTable(db.Name), "")
	lines := runCheck(t, yaml)
	if !findLine(lines, "INFO", "SENT marks are logged with minimal row images") {
		t.Fatalf("no line saying the marks are minimal in:\n%s", strings.Join(lines, "\n"))
	}

	user := testenv.UniqueName("nosess")
	db.Exec(t, fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY 'pw-%s'", user, user))
	db.Exec(t, fmt.Sprintf("GRANT SELECT, UPDATE ON %s.* TO '%s'@'127.0.0.1'", db.Name, user))
	t.Cleanup(func() { _, _ = db.Primary.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'127.0.0.1'", user)) })
	_, pp := testenv.HostPort(testenv.PrimaryDSN)
	yaml = strings.Replace(yaml, fmt.Sprintf("port: %d, user: root}", pp), fmt.Sprintf("port: %d, user: %s, password: pw-%s}", pp, user, user), 1)
	lines = runCheck(t, yaml)
	grant := "BINLOG ADMIN"
	if testenv.Current.MySQL {
		grant = "SESSION_VARIABLES_ADMIN"
	}
	if !findLine(lines, "WARN", "SENT marks will be logged with full row images", "GRANT "+grant) {
		t.Fatalf("no warning naming GRANT %s in:\n%s", grant, strings.Join(lines, "\n"))
	}

	lines = runCheck(t, strings.Replace(yaml, "{flush_interval: 50ms}", "{flush_interval: 50ms, mark_row_image: full}", 1))
	if findLine(lines, "WARN", "SENT marks") {
		t.Fatalf("relay.mark_row_image: full still warns:\n%s", strings.Join(lines, "\n"))
	}
}
