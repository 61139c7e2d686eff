package outboxsql

import (
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func validTable() outbox.Table {
	return outbox.Table{
		Schema: "app", Name: "outbox",
		Columns:  outbox.Columns{ID: "id", Payload: "body", Status: "state", Exchange: "ex"},
		Statuses: outbox.Statuses{Pending: "NEW", Sent: "DONE", Publishable: []string{"NEW"}},
	}
}

func TestStatusSQL(t *testing.T) {
	s := outbox.Statuses{Publishable: []string{"PENDING", "SENDING"}}
	if got := SQLList(&s, s.Publishable); got != "'PENDING', 'SENDING'" {
		t.Fatalf("strings: %s", got)
	}
	n := outbox.Statuses{Publishable: []string{"0"}, Numeric: true}
	if got := SQLList(&n, []string{"0", "3"}); got != "0, 3" {
		t.Fatalf("numbers: %s", got)
	}
}

func TestCreatedBefore(t *testing.T) {
	tb := validTable()
	if _, _, ok := CreatedBefore(&tb, time.Minute); ok {
		t.Fatal("a table without a created column has no condition")
	}
	tb.Columns.CreatedAt = "create_time"
	cond, arg, ok := CreatedBefore(&tb, 90*time.Second)
	if !ok || cond != "`create_time` < NOW(3) - INTERVAL ? MICROSECOND" || arg != int64(90_000_000) {
		t.Fatalf("datetime: %s %v", cond, arg)
	}
	tb.CreatedAtEpoch = "ms"
	cond, arg, _ = CreatedBefore(&tb, 90*time.Second)
	if cond != "`create_time` < UNIX_TIMESTAMP(NOW(3)) * 1000 - ?" || arg != int64(90_000) {
		t.Fatalf("ms: %s %v", cond, arg)
	}
	tb.CreatedAtEpoch = "s"
	cond, arg, _ = CreatedBefore(&tb, 90*time.Second)
	if cond != "`create_time` < UNIX_TIMESTAMP(NOW(3)) - ?" || arg != int64(90) {
		t.Fatalf("s: %s %v", cond, arg)
	}
}

func TestQuoting(t *testing.T) {
	tb := outbox.Table{Schema: "app", Name: "my$outbox"}
	if got := QuotedName(&tb); got != "`app`.`my$outbox`" {
		t.Fatal(got)
	}
	if got := ident.Quote("a`b"); got != "`a``b`" {
		t.Fatal(got)
	}
}
