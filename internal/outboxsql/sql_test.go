package outboxsql

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

func presetTable(t *testing.T, name string) *outbox.Table {
	t.Helper()
	tb, err := outbox.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	tb.Schema = "app"
	return &tb
}

// The read and mark statements for the seed table and for local_message
// (numeric statuses, no version or error column).
func TestStatements(t *testing.T) {
	seed, local, eventuate := presetTable(t, "producer-message"), presetTable(t, "local-message"), presetTable(t, "eventuate")
	v := int64(4)
	ratio, ratioArgs := RetryRatioSQL(seed, nil)
	localRatio, _ := RetryRatioSQL(local, []string{"0", "2"})
	retry, retryArgs := MarkRetrySQL(seed, Retry{Status: "PENDING", Retrying: true, Delay: time.Second, Reason: "nack",
		IDs: []any{7}, From: []string{"SENDING"}, Version: &v})
	failed, failedArgs := MarkRetrySQL(local, Retry{Status: "2", IDs: []any{1, 2}})
	guarded, guardedArgs := MarkRetrySQL(seed, Retry{Status: "FAILED", IDs: []any{1, 2}, MessageIDs: []any{"m-1", "m-2"}, From: []string{"PENDING"}})
	for _, c := range []struct{ got, want string }{
		{CountByStatusSQL(seed, nil), "SELECT `status`, COUNT(*) FROM `app`.`producer_message` GROUP BY `status` ORDER BY `status`"},
		{CountByStatusSQL(local, []string{"0", "2"}), "SELECT `status`, COUNT(*) FROM `app`.`local_message` WHERE `status` IN (0, 2) GROUP BY `status` ORDER BY `status`"},
		{OldestAgeSQL(seed, []string{"PENDING"}), "SELECT GREATEST(TIMESTAMPDIFF(MICROSECOND, MIN(`create_time`), NOW(6)) / 1e6, 0) FROM `app`.`producer_message` WHERE `status` = 'PENDING'"},
		{OldestAgeSQL(eventuate, []string{"0"}), "SELECT GREATEST(UNIX_TIMESTAMP(NOW(3)) - MIN(`creation_time`) / 1000, 0) FROM `app`.`message` WHERE `published` = 0"},
		{ratio, "SELECT COUNT(*), COALESCE(SUM(`retry_count` >= 3), 0) FROM `app`.`producer_message` WHERE `update_time` >= NOW(3) - INTERVAL ? MICROSECOND"},
		{localRatio, "SELECT COUNT(*), COALESCE(SUM(`retry_count` >= 3), 0) FROM `app`.`local_message` WHERE `status` IN (0, 2) AND `updated_at` >= NOW(3) - INTERVAL ? MICROSECOND"},
		{MarkSentSQL(seed, 2, []string{"PENDING", "SENDING"}, true), "UPDATE `app`.`producer_message` SET `status` = 'SENT', `version` = `version` + 1, `update_time` = NOW(3) WHERE `id` IN (?,?) AND `status` IN ('PENDING', 'SENDING') AND `version` = ?"},
		{MarkSentSQL(local, 1, []string{"0"}, true), "UPDATE `app`.`local_message` SET `status` = 1, `updated_at` = NOW(3) WHERE `id` IN (?) AND `status` IN (0)"},
		{MarkSentGuardedSQL(seed, 2, []string{"PENDING", "SENDING"}), "UPDATE `app`.`producer_message` SET `status` = 'SENT', `version` = `version` + 1, `update_time` = NOW(3) WHERE `id` IN (?,?) AND `message_id` IN (?,?) AND `status` IN ('PENDING', 'SENDING')"},
		{retry, "UPDATE `app`.`producer_message` SET `status` = 'PENDING', `retry_count` = `retry_count` + 1, `next_retry_time` = NOW(3) + INTERVAL ? MICROSECOND, `error_msg` = ?, `version` = `version` + 1, `update_time` = NOW(3) WHERE `id` = ? AND `status` IN ('SENDING') AND `version` = ?"},
		{failed, "UPDATE `app`.`local_message` SET `status` = 2, `retry_count` = `retry_count` + 1, `updated_at` = NOW(3) WHERE `id` IN (?, ?)"},
		{SentAmongSQL(seed, 2), "SELECT `id`, `message_id` FROM `app`.`producer_message` WHERE `id` IN (?,?) AND `status` = 'SENT'"},
		{SentAmongSQL(local, 1), "SELECT `id`, CRC32(`message_body`) FROM `app`.`local_message` WHERE `id` IN (?) AND `status` = 1"},
		{guarded, "UPDATE `app`.`producer_message` SET `status` = 'FAILED', `retry_count` = `retry_count` + 1, `error_msg` = ?, `version` = `version` + 1, `update_time` = NOW(3) WHERE `id` IN (?, ?) AND `message_id` IN (?,?) AND `status` IN ('PENDING')"},
	} {
		if c.got != c.want {
			t.Errorf("\n got %s\nwant %s", c.got, c.want)
		}
	}
	if len(ratioArgs) != 1 || ratioArgs[0] != RetryRatioWindow.Microseconds() {
		t.Errorf("retry ratio args %v", ratioArgs)
	}
	if want := []any{time.Second.Microseconds(), "nack", 7, int64(4)}; len(retryArgs) != 4 || retryArgs[0] != want[0] || retryArgs[1] != want[1] || retryArgs[2] != want[2] || retryArgs[3] != want[3] {
		t.Errorf("retry args %v, want %v", retryArgs, want)
	}
	if fmt.Sprint(guardedArgs) != "[ 1 2 m-1 m-2]" {
		t.Errorf("guarded retry args %v, want the reason, the ids, then the message ids", guardedArgs)
	}
	if len(failedArgs) != 2 {
		t.Errorf("FAILED args %v, want the two ids", failedArgs)
	}
}

// Reconcile's reads, for a table with updated_at and a version (the seed's)
// and for one with neither a status nor a separate message id column
// (Debezium's).
func TestReconcileStatements(t *testing.T) {
	seed, debezium := presetTable(t, "producer-message"), presetTable(t, "debezium")
	lookup, lookupCols := LookupSQL(seed, "message_id", 2)
	byID, byIDCols := LookupSQL(debezium, "id", 1)
	if !slices.Equal(lookupCols, []string{"id", "message_id"}) || !slices.Equal(byIDCols, []string{"id"}) {
		t.Errorf("lookup columns %v and %v", lookupCols, byIDCols)
	}
	debezium.Columns.CreatedAt = "created"
	for _, c := range []struct{ got, want string }{
		{lookup, "SELECT `id`, `message_id` FROM `app`.`producer_message` WHERE `message_id` IN (?,?)"},
		{byID, "SELECT `id` FROM `app`.`outbox` WHERE `id` IN (?)"},
		{ReconcileChunkSQL(seed, []string{"id", "message_id"}, "`id` > ?"),
			"SELECT `id`, `message_id`, `status`, `version`, COALESCE(`update_time` >= ?, `create_time` >= ?), `create_time` < ? FROM `app`.`producer_message` WHERE `create_time` >= ? AND `create_time` < ? AND `id` > ? ORDER BY `id` LIMIT ?"},
		{ReconcileChunkSQL(debezium, []string{"id"}, "1"),
			"SELECT `id`, NULL, 0, `created` >= ?, `created` < ? FROM `app`.`outbox` WHERE `created` >= ? AND `created` < ? AND 1 ORDER BY `id` LIMIT ?"},
	} {
		if c.got != c.want {
			t.Errorf("\n got %s\nwant %s", c.got, c.want)
		}
	}
}

// A failure record written again (after a rename moved its rows) moves
// only rows still at the retry count the attempt read, so a row the first
// write reached is not counted twice; a table without a retry count has
// no such condition.
func TestRetryWrittenAgainMatchesTheRetryCount(t *testing.T) {
	seed, eventuate := presetTable(t, "producer-message"), presetTable(t, "eventuate")
	two := 2
	q, args := MarkRetrySQL(seed, Retry{Status: "PENDING", Retrying: true, Delay: time.Second, Reason: "nack",
		IDs: []any{1}, MessageIDs: []any{"m-1"}, From: []string{"PENDING"}, RetriesWere: &two})
	want := "UPDATE `app`.`producer_message` SET `status` = 'PENDING', `retry_count` = `retry_count` + 1, `next_retry_time` = NOW(3) + INTERVAL ? MICROSECOND, `error_msg` = ?, `version` = `version` + 1, `update_time` = NOW(3) WHERE `id` = ? AND `message_id` IN (?) AND `status` IN ('PENDING') AND `retry_count` = ?"
	if q != want || fmt.Sprint(args) != "[1000000 nack 1 m-1 2]" {
		t.Errorf("got %s %v\nwant %s [1000000 nack 1 m-1 2]", q, args, want)
	}
	q, _ = MarkRetrySQL(eventuate, Retry{Status: "0", IDs: []any{1}, RetriesWere: &two})
	if want := "UPDATE `app`.`message` SET `published` = 0 WHERE `id` = ?"; q != want {
		t.Errorf("got %s\nwant %s (no retry count to match)", q, want)
	}
}
