package outboxsql

import (
	"reflect"
	"strings"
	"testing"
)

// The console's reads: one status range with a LIMIT for the groups (both
// states in one range), keyset pages by id for a group's rows, and no
// group at all for a table without a status column.
func TestConsoleStatements(t *testing.T) {
	seed, local, deb := presetTable(t, "producer-message"), presetTable(t, "local-message"), presetTable(t, "debezium")
	q, args, ok := FailureGroupsSQL(seed, 50000, 100)
	want := "SELECT g.st, g.h, COUNT(*), MIN(g.seen), MAX(g.seen), MIN(g.nrt), MIN(g.id) FROM (SELECT CASE WHEN `status` = 'FAILED' THEN 'failed' ELSE 'retrying' END AS st, " +
		"SHA2(COALESCE(LEFT(`error_msg`, 1000), ''), 256) AS h, `update_time` AS seen, `next_retry_time` AS nrt, `id` AS id FROM `app`.`producer_message` " +
		"WHERE `status` IN ('FAILED', 'PENDING') AND (`status` = 'FAILED' OR `retry_count` > 0) LIMIT ?) g GROUP BY g.st, g.h ORDER BY COUNT(*) DESC, g.st, g.h LIMIT ?"
	if !ok || q != want || !reflect.DeepEqual(args, []any{50000, 100}) {
		t.Errorf("seed groups:\n got %s %v\nwant %s", q, args, want)
	}
	q, _, ok = FailureGroupsSQL(local, 10, 10)
	if !ok || !strings.Contains(q, "WHERE `status` IN (2, 0) AND (`status` = 2 OR `retry_count` > 0)") || !strings.Contains(q, "'' AS h") {
		t.Errorf("local_message groups (numeric statuses, no error column): %s", q)
	}
	if got, want := FailureTextsSQL(seed, 2), "SELECT `id`, LEFT(`error_msg`, 1000) FROM `app`.`producer_message` WHERE `id` IN (?,?)"; got != want {
		t.Errorf("texts:\n got %s\nwant %s", got, want)
	}
	if _, _, ok := FailureGroupsSQL(deb, 10, 10); ok {
		t.Error("a table without a status column has failure groups")
	}
	reason := "no exchange"
	cols := RowColumns(seed, false)
	if strings.Contains(strings.Join(cols, ","), "content") {
		t.Errorf("payload read though not shown: %v", cols)
	}
	q, args = FailureRowsSQL(seed, []string{"id", "message_id"}, StateFailed, &reason, "9007199254740993", 50)
	want = "SELECT `id`, `message_id`, LEFT(`error_msg`, 1000), `update_time`, `next_retry_time` FROM `app`.`producer_message` " +
		"WHERE `status` = 'FAILED' AND LEFT(`error_msg`, 1000) = ? AND `id` > ? ORDER BY `id` LIMIT ?"
	if q != want || !reflect.DeepEqual(args, []any{reason, int64(9007199254740993), 50}) {
		t.Errorf("rows:\n got %s %#v\nwant %s", q, args, want)
	}
	none := ""
	q, _ = FailureRowsSQL(seed, []string{"id"}, StateRetrying, &none, "", 10)
	if !strings.Contains(q, "WHERE `status` = 'PENDING' AND `retry_count` > 0 AND (`error_msg` IS NULL OR `error_msg` = '') ORDER BY") {
		t.Errorf("retrying rows without an error: %s", q)
	}
}
