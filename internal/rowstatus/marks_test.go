package rowstatus_test

import (
	"context"
	"testing"

	"github.com/binlog-relay/binlog-relay/internal/rowstatus"
	"github.com/binlog-relay/binlog-relay/internal/testenv"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// reusedIDs is a table whose row 1 carries another message (new-1) than
// the marks' row 1 (old-1, a row of another table under the same id), and
// whose row 2 is the marks' own (old-2).
func reusedIDs(t *testing.T) (*testenv.DB, *outbox.Table, *rowstatus.Writer, rowstatus.Marks) {
	t.Helper()
	testenv.Integration(t)
	db := testenv.NewDB(t, "schema/producer_message.sql")
	db.Exec(t, "INSERT INTO producer_message (id, message_id, exchange, content) VALUES (1, 'new-1', 'ex', '{}'), (2, 'old-2', 'ex', '{}')")
	tb := outboxtest.Preset(t, "producer-message", db.Name, nil)
	var m rowstatus.Marks
	m.Add(int64(1), "old-1")
	m.Add(int64(2), "old-2")
	return db, tb, rowstatus.NewWriter(db.Primary, rowstatus.Retry{}), m
}

// A mark matches the message id too: one that reaches another table under
// the outbox table's name (renamed away, ids starting over) moves no row
// that carries another message under the same id.
func TestMarkSentMatchesTheMessageID(t *testing.T) {
	db, tb, w, m := reusedIDs(t)
	n, err := w.MarkSent(context.Background(), tb, m)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE id = 1 AND status = 'PENDING'") != 1 {
		t.Fatalf("marked %d rows; want 1, and row 1 (another message) still PENDING", n)
	}
	// Without message ids (a table whose message id is its id) the ids alone decide.
	n, err = w.MarkSent(context.Background(), tb, rowstatus.Marks{IDs: []any{int64(1)}})
	if err != nil || n != 1 {
		t.Fatalf("marked %d rows (%v); want 1", n, err)
	}
}

// A failure is matched by message id as the marks are, and a table that
// does not exist is told apart (the relay skips it rather than retrying).
func TestMarkRetryManyMatchesTheMessageID(t *testing.T) {
	db, tb, w, m := reusedIDs(t)
	a := rowstatus.Attempt{MaxRetries: 5, Reason: "nacked", FromStatuses: tb.Statuses.Publishable}
	out, n, err := w.MarkRetryMany(context.Background(), tb, a, m)
	if err != nil || n != 1 || out != rowstatus.Retrying {
		t.Fatalf("recorded %d rows (%v, outcome %v); want 1, retrying", n, err, out)
	}
	if got := db.Count(t, "SELECT COUNT(*) FROM producer_message WHERE retry_count = 1 AND message_id = 'old-2'"); got != 1 ||
		db.Count(t, "SELECT retry_count FROM producer_message WHERE id = 1") != 0 {
		t.Fatal("the failure reached row 1, another message under the same id, or missed row 2")
	}
	gone := *tb
	gone.Name = "producer_message_gone"
	if _, _, err := w.MarkRetryMany(context.Background(), &gone, a, m); !rowstatus.TableMissing(err) {
		t.Fatalf("recording in a missing table: %v; want TableMissing", err)
	}
	if _, err := w.MarkSent(context.Background(), &gone, m); !rowstatus.TableMissing(err) {
		t.Fatalf("marking in a missing table: %v; want TableMissing", err)
	}
}
