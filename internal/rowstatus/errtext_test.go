package rowstatus_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// A reason longer than the error column is cut to the column (characters
// for VARCHAR, bytes for TEXT) on a character boundary, so strict SQL mode
// takes the write: the row ends FAILED with as much of the reason as fits,
// rather than a status write retried forever.
func TestErrorTextFitsTheColumn(t *testing.T) {
	testenv.Integration(t)
	db := testenv.NewDB(t)
	db.Exec(t, `CREATE TABLE short_err (id BIGINT PRIMARY KEY, msg_id VARCHAR(64), body TEXT, st VARCHAR(10), err VARCHAR(12)) DEFAULT CHARSET=utf8mb4;
		CREATE TABLE tiny_err (id BIGINT PRIMARY KEY, msg_id VARCHAR(64), body TEXT, st VARCHAR(10), err TINYTEXT) DEFAULT CHARSET=utf8mb4;
		INSERT INTO short_err VALUES (1, 'a', 'x', 'NEW', NULL);
		INSERT INTO tiny_err VALUES (1, 'a', 'x', 'NEW', NULL)`)
	var mode string
	if err := db.Primary.QueryRow("SELECT @@SESSION.sql_mode").Scan(&mode); err != nil || !strings.Contains(mode, "STRICT_TRANS_TABLES") {
		t.Fatalf("the primary is not in strict mode (%q, %v): this test would prove nothing", mode, err)
	}
	reason := strings.Repeat("发布失败: exchange 'orders' é ", 40) // multi-byte, over 1,000 bytes
	if _, err := db.Primary.Exec("UPDATE short_err SET err = ? WHERE id = 1", reason); err == nil {
		t.Fatal("strict mode took an over-long value: this test would prove nothing")
	}
	w := rowstatus.NewWriter(db.Primary, rowstatus.Retry{})
	for _, c := range []struct {
		table     string
		wantChars int // at most
		wantBytes int // at most
	}{{"short_err", 12, 48}, {"tiny_err", 255, 255}} {
		tb := &outbox.Table{Schema: db.Name, Name: c.table,
			Columns:  outbox.Columns{ID: "id", MessageID: "msg_id", Payload: "body", Status: "st", Error: "err"},
			Statuses: outbox.Statuses{Pending: "NEW", Sent: "DONE", Failed: "DEAD", Publishable: []string{"NEW"}},
			Route:    outbox.Route{Exchange: "x"}, MaxRetries: 1}
		if err := tb.Validate("tables[0]"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := w.MarkRetry(ctx, tb, rowstatus.Attempt{ID: 1, Retries: 0, MaxRetries: 1, Reason: reason, FromStatuses: []string{"NEW"}})
		cancel()
		if err != nil || out != rowstatus.Failed {
			t.Fatalf("%s: outcome %v, error %v", c.table, out, err)
		}
		var st, got string
		if err := db.Primary.QueryRow("SELECT st, err FROM "+c.table+" WHERE id = 1").Scan(&st, &got); err != nil {
			t.Fatal(err)
		}
		n := utf8.RuneCountInString(got)
		if st != "DEAD" || !utf8.ValidString(got) || !strings.HasPrefix(reason, got) || n > c.wantChars || len(got) > c.wantBytes {
			t.Fatalf("%s: status %s, error %d chars / %d bytes %q", c.table, st, n, len(got), got)
		}
		// As much as fits: one more character would not.
		_, size := utf8.DecodeRuneInString(reason[len(got):])
		if n+1 <= c.wantChars && len(got)+size <= c.wantBytes {
			t.Fatalf("%s: cut short at %d chars / %d bytes", c.table, n, len(got))
		}
		t.Logf("%s: %d-byte reason stored as %d chars / %d bytes", c.table, len(reason), n, len(got))
	}
}
