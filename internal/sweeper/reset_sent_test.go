package sweeper

import (
	"strings"
	"testing"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The reset a repair sends: only a row still SENT (and at the version it was
// read with, where the table has a version column) goes back to pending,
// due now, with its retry count reset.
func TestResetSentSQL(t *testing.T) {
	cases := []struct {
		preset string
		want   string
	}{
		{"producer-message", "UPDATE `app`.`producer_message` SET `status` = 'PENDING', `retry_count` = 0, `next_retry_time` = NOW(3), `error_msg` = ?, `version` = `version` + 1, `update_time` = NOW(3) WHERE `id` = ? AND `status` = 'SENT' AND `version` = ?"},
		{"local-message", "UPDATE `app`.`local_message` SET `status` = 0, `retry_count` = 0, `next_retry_time` = NOW(3), `updated_at` = NOW(3) WHERE `id` = ? AND `status` = 1"},
		{"message-record", "UPDATE `app`.`t_message_record` SET `status` = 'PENDING', `retry_count` = 0, `error_message` = ?, `update_time` = NOW(3) WHERE `id` = ? AND `status` = 'SENT'"},
	}
	for _, c := range cases {
		p, err := newPlan(table(t, c.preset, nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := p.ResetSentSQL(); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.preset, got, c.want)
		}
	}
	err := Sweepable(table(t, "debezium", nil))
	if err == nil || !strings.Contains(err.Error(), "no status column") {
		t.Fatalf("debezium: %v, want a refusal naming the missing status column", err)
	}
	if err := Sweepable(table(t, "producer-message", func(tb *outbox.Table) { tb.Columns.CreatedAt = "" })); err == nil {
		t.Fatal("a table without created_at is sweepable")
	}
}
