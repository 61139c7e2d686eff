package sweeper

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/testenv/outboxtest"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// table is the preset's table in schema app, changed by edit.
func table(t *testing.T, preset string, edit func(*outbox.Table)) *outbox.Table {
	t.Helper()
	return outboxtest.Preset(t, preset, "app", edit)
}

type stmt struct {
	sql  string
	args []any
}

func check(t *testing.T, what string, gotSQL string, gotArgs []any, want stmt) {
	t.Helper()
	if gotSQL != want.sql {
		t.Errorf("%s:\n got %s\nwant %s", what, gotSQL, want.sql)
	}
	if len(gotArgs) == 0 && len(want.args) == 0 {
		return
	}
	if !reflect.DeepEqual(gotArgs, want.args) {
		t.Errorf("%s args: got %#v, want %#v", what, gotArgs, want.args)
	}
}

// The statements the sweeper sends for each mapping the relay supports: with
// and without version and next_retry_time columns, string and numeric
// statuses, DATETIME and epoch creation times.
func TestPlanSQL(t *testing.T) {
	const (
		grace   = time.Minute
		zombie  = 5 * time.Minute
		retain  = time.Hour
		graceUS = int64(60_000_000)
		zombUS  = int64(300_000_000)
		hourUS  = int64(3_600_000_000)
	)
	// A row never attempted with a next_retry_time (requeued) waits the
	// grace period from it too: the binlog path publishes it first.
	seedDueNoUpdated := "`status` = 'PENDING' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND AND (`next_retry_time` IS NULL OR `next_retry_time` <= NOW(3)) AND (`retry_count` > 0 OR `next_retry_time` IS NULL OR `next_retry_time` < NOW(3) - INTERVAL ? MICROSECOND)"
	// So does a row written within the grace period (re-queued by anything),
	// unless that write scheduled it later (a retry).
	const slackUS = int64(2_000_000)
	seedDue := seedDueNoUpdated + " AND (`update_time` IS NULL OR `update_time` < NOW(3) - INTERVAL ? MICROSECOND OR `next_retry_time` > `update_time` + INTERVAL ? MICROSECOND)"
	cases := []struct {
		name                                 string
		table                                *outbox.Table
		mode                                 mode
		look, claim, claimUpdate, zombie     stmt
		archiveDelete, archiveSelect, requeu stmt
	}{
		{
			name: "seed: SENDING, version, next_retry_time", table: table(t, "producer-message", nil), mode: modeSending,
			look: stmt{"SELECT EXISTS(SELECT 1 FROM `app`.`producer_message` WHERE " + seedDue + "), EXISTS(SELECT 1 FROM `app`.`producer_message` WHERE `status` = 'SENDING' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND)",
				[]any{graceUS, graceUS, graceUS, slackUS, zombUS}},
			claim: stmt{"SELECT `content`, `exchange`, `id`, `max_retry_count`, `message_id`, `retry_count`, `routing_key`, `version` FROM `app`.`producer_message` WHERE " + seedDue + " LIMIT ? FOR UPDATE SKIP LOCKED",
				[]any{graceUS, graceUS, graceUS, slackUS, 500}},
			claimUpdate: stmt{"UPDATE `app`.`producer_message` SET `status` = 'SENDING', `version` = `version` + 1, `update_time` = NOW(3) WHERE `id` IN (?,?)", nil},
			zombie: stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `next_retry_time` = NOW(3), `error_msg` = ?, `version` = `version` + 1, `update_time` = NOW(3) WHERE `status` = 'SENDING' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ?",
				[]any{"reset to pending: SENDING for more than 5m0s (its sweeper stopped mid-publish)", zombUS, 500}},
			archiveDelete: stmt{"DELETE FROM `app`.`producer_message` WHERE `status` = 'SENT' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ?", []any{hourUS, 1000}},
			archiveSelect: stmt{"SELECT `id` FROM `app`.`producer_message` WHERE `status` = 'SENT' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ? FOR UPDATE SKIP LOCKED", []any{hourUS, 1000}},
			requeu: stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `retry_count` = 0, `next_retry_time` = NOW(3), `version` = `version` + 1, `update_time` = NOW(3) WHERE `status` = 'FAILED' AND `update_time` >= NOW(3) - INTERVAL ? MICROSECOND AND `id` IN (?,?) AND `id` IN (?,?,?)",
				[]any{hourUS, "7", "9"}},
		},
		{
			name: "seed without version or next_retry_time: no version check, due by creation and update time",
			table: table(t, "producer-message", func(tb *outbox.Table) {
				tb.Columns.Version, tb.Columns.NextRetryTime = "", ""
			}), mode: modeSending,
			look: stmt{"SELECT EXISTS(SELECT 1 FROM `app`.`producer_message` WHERE `status` = 'PENDING' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND AND (`update_time` IS NULL OR `update_time` < NOW(3) - INTERVAL ? MICROSECOND)), EXISTS(SELECT 1 FROM `app`.`producer_message` WHERE `status` = 'SENDING' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND)",
				[]any{graceUS, graceUS, zombUS}},
			claim: stmt{"SELECT `content`, `exchange`, `id`, `max_retry_count`, `message_id`, `retry_count`, `routing_key` FROM `app`.`producer_message` WHERE `status` = 'PENDING' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND AND (`update_time` IS NULL OR `update_time` < NOW(3) - INTERVAL ? MICROSECOND) LIMIT ? FOR UPDATE SKIP LOCKED",
				[]any{graceUS, graceUS, 500}},
			claimUpdate: stmt{"UPDATE `app`.`producer_message` SET `status` = 'SENDING', `update_time` = NOW(3) WHERE `id` IN (?,?)", nil},
			zombie: stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `error_msg` = ?, `update_time` = NOW(3) WHERE `status` = 'SENDING' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ?",
				[]any{"reset to pending: SENDING for more than 5m0s (its sweeper stopped mid-publish)", zombUS, 500}},
			archiveDelete: stmt{"DELETE FROM `app`.`producer_message` WHERE `status` = 'SENT' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ?", []any{hourUS, 1000}},
			archiveSelect: stmt{"SELECT `id` FROM `app`.`producer_message` WHERE `status` = 'SENT' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ? FOR UPDATE SKIP LOCKED", []any{hourUS, 1000}},
			requeu: stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `retry_count` = 0, `update_time` = NOW(3) WHERE `status` = 'FAILED' AND `update_time` >= NOW(3) - INTERVAL ? MICROSECOND AND `id` IN (?,?) AND `id` IN (?,?,?)",
				[]any{hourUS, "7", "9"}},
		},
		{
			name: "seed without updated_at: next_retry_time is the claim's lease and tells zombies",
			table: table(t, "producer-message", func(tb *outbox.Table) {
				tb.Columns.UpdatedAt = ""
			}), mode: modeSending,
			look: stmt{"SELECT EXISTS(SELECT 1 FROM `app`.`producer_message` WHERE " + seedDueNoUpdated + "), EXISTS(SELECT 1 FROM `app`.`producer_message` WHERE `status` = 'SENDING' AND (`next_retry_time` <= NOW(3) OR (`next_retry_time` IS NULL AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND)))",
				[]any{graceUS, graceUS, zombUS}},
			claim: stmt{"SELECT `content`, `exchange`, `id`, `max_retry_count`, `message_id`, `retry_count`, `routing_key`, `version` FROM `app`.`producer_message` WHERE " + seedDueNoUpdated + " LIMIT ? FOR UPDATE SKIP LOCKED",
				[]any{graceUS, graceUS, 500}},
			claimUpdate: stmt{"UPDATE `app`.`producer_message` SET `status` = 'SENDING', `next_retry_time` = NOW(3) + INTERVAL ? MICROSECOND, `version` = `version` + 1 WHERE `id` IN (?,?)", []any{zombUS}},
			zombie: stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `next_retry_time` = NOW(3), `error_msg` = ?, `version` = `version` + 1 WHERE `status` = 'SENDING' AND (`next_retry_time` <= NOW(3) OR (`next_retry_time` IS NULL AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND)) LIMIT ?",
				[]any{"reset to pending: SENDING for more than 5m0s (its sweeper stopped mid-publish)", zombUS, 500}},
			archiveDelete: stmt{"DELETE FROM `app`.`producer_message` WHERE `status` = 'SENT' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ?", []any{hourUS, 1000}},
			archiveSelect: stmt{"SELECT `id` FROM `app`.`producer_message` WHERE `status` = 'SENT' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ? FOR UPDATE SKIP LOCKED", []any{hourUS, 1000}},
			requeu: stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `retry_count` = 0, `next_retry_time` = NOW(3), `version` = `version` + 1 WHERE `status` = 'FAILED' AND NOT (`create_time` < NOW(3) - INTERVAL ? MICROSECOND) AND `id` IN (?,?) AND `id` IN (?,?,?)",
				[]any{hourUS, "7", "9"}},
		},
		{
			name: "local_message: numeric statuses, no SENDING: next_retry_time lease", table: table(t, "local-message", nil), mode: modeLease,
			look: stmt{"SELECT EXISTS(SELECT 1 FROM `app`.`local_message` WHERE `status` = 0 AND `created_at` < NOW(3) - INTERVAL ? MICROSECOND AND (`next_retry_time` IS NULL OR `next_retry_time` <= NOW(3)) AND (`retry_count` > 0 OR `next_retry_time` IS NULL OR `next_retry_time` < NOW(3) - INTERVAL ? MICROSECOND) AND (`updated_at` IS NULL OR `updated_at` < NOW(3) - INTERVAL ? MICROSECOND OR `next_retry_time` > `updated_at` + INTERVAL ? MICROSECOND)), 0",
				[]any{graceUS, graceUS, graceUS, slackUS}},
			claim: stmt{"SELECT `biz_id`, `biz_type`, `exchange`, `id`, `message_body`, `retry_count`, `routing_key` FROM `app`.`local_message` WHERE `status` = 0 AND `created_at` < NOW(3) - INTERVAL ? MICROSECOND AND (`next_retry_time` IS NULL OR `next_retry_time` <= NOW(3)) AND (`retry_count` > 0 OR `next_retry_time` IS NULL OR `next_retry_time` < NOW(3) - INTERVAL ? MICROSECOND) AND (`updated_at` IS NULL OR `updated_at` < NOW(3) - INTERVAL ? MICROSECOND OR `next_retry_time` > `updated_at` + INTERVAL ? MICROSECOND) LIMIT ? FOR UPDATE SKIP LOCKED",
				[]any{graceUS, graceUS, graceUS, slackUS, 500}},
			claimUpdate:   stmt{"UPDATE `app`.`local_message` SET `next_retry_time` = NOW(3) + INTERVAL ? MICROSECOND, `updated_at` = NOW(3) WHERE `id` IN (?,?)", []any{zombUS}},
			zombie:        stmt{"", nil},
			archiveDelete: stmt{"DELETE FROM `app`.`local_message` WHERE `status` = 1 AND `updated_at` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ?", []any{hourUS, 1000}},
			archiveSelect: stmt{"SELECT `id` FROM `app`.`local_message` WHERE `status` = 1 AND `updated_at` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ? FOR UPDATE SKIP LOCKED", []any{hourUS, 1000}},
			requeu: stmt{"UPDATE `app`.`local_message` SET `status` = 0, `retry_count` = 0, `next_retry_time` = NOW(3), `updated_at` = NOW(3) WHERE `status` = 2 AND `updated_at` >= NOW(3) - INTERVAL ? MICROSECOND AND `id` IN (?,?) AND `id` IN (?,?,?)",
				[]any{hourUS, "7", "9"}},
		},
		{
			name: "t_message_record: neither SENDING nor next_retry_time: rows stay locked while published", table: table(t, "message-record", nil), mode: modeLocked,
			look: stmt{"SELECT EXISTS(SELECT 1 FROM `app`.`t_message_record` WHERE `status` = 'PENDING' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND AND (`update_time` IS NULL OR `update_time` < NOW(3) - INTERVAL ? MICROSECOND)), 0",
				[]any{graceUS, graceUS}},
			claim: stmt{"SELECT `id`, `message_body`, `message_id`, `retry_count`, `tag`, `topic` FROM `app`.`t_message_record` WHERE `status` = 'PENDING' AND `create_time` < NOW(3) - INTERVAL ? MICROSECOND AND (`update_time` IS NULL OR `update_time` < NOW(3) - INTERVAL ? MICROSECOND) LIMIT ? FOR UPDATE SKIP LOCKED",
				[]any{graceUS, graceUS, 500}},
			claimUpdate:   stmt{"", nil},
			zombie:        stmt{"", nil},
			archiveDelete: stmt{"DELETE FROM `app`.`t_message_record` WHERE `status` = 'SENT' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ?", []any{hourUS, 1000}},
			archiveSelect: stmt{"SELECT `id` FROM `app`.`t_message_record` WHERE `status` = 'SENT' AND `update_time` < NOW(3) - INTERVAL ? MICROSECOND LIMIT ? FOR UPDATE SKIP LOCKED", []any{hourUS, 1000}},
			requeu: stmt{"UPDATE `app`.`t_message_record` SET `status` = 'PENDING', `retry_count` = 0, `update_time` = NOW(3) WHERE `status` = 'FAILED' AND `update_time` >= NOW(3) - INTERVAL ? MICROSECOND AND `id` IN (?,?) AND `id` IN (?,?,?)",
				[]any{hourUS, "7", "9"}},
		},
		{
			name: "eventuate: published 0/1, creation_time in epoch ms, no failed status", table: table(t, "eventuate", nil), mode: modeLocked,
			look: stmt{"SELECT EXISTS(SELECT 1 FROM `app`.`message` WHERE `published` = 0 AND `creation_time` < UNIX_TIMESTAMP(NOW(3)) * 1000 - ?), 0",
				[]any{int64(60_000)}},
			claim: stmt{"SELECT `destination`, `headers`, `id`, `payload` FROM `app`.`message` WHERE `published` = 0 AND `creation_time` < UNIX_TIMESTAMP(NOW(3)) * 1000 - ? LIMIT ? FOR UPDATE SKIP LOCKED",
				[]any{int64(60_000), 500}},
			claimUpdate:   stmt{"", nil},
			zombie:        stmt{"", nil},
			archiveDelete: stmt{"DELETE FROM `app`.`message` WHERE `published` = 1 AND `creation_time` < UNIX_TIMESTAMP(NOW(3)) * 1000 - ? LIMIT ?", []any{int64(3_600_000), 1000}},
			archiveSelect: stmt{"SELECT `id` FROM `app`.`message` WHERE `published` = 1 AND `creation_time` < UNIX_TIMESTAMP(NOW(3)) * 1000 - ? LIMIT ? FOR UPDATE SKIP LOCKED", []any{int64(3_600_000), 1000}},
			requeu:        stmt{"", nil}, // no failed status: an error, checked below
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := newPlan(c.table)
			if err != nil {
				t.Fatal(err)
			}
			if p.mode != c.mode {
				t.Errorf("mode %s, want %s", p.mode, c.mode)
			}
			q, args := p.LookSQL(grace, zombie)
			check(t, "look", q, args, c.look)
			q, args = p.ClaimSQL(grace, 500)
			check(t, "claim", q, args, c.claim)
			q, args = p.ClaimUpdateSQL(2, zombie)
			check(t, "claim update", q, args, c.claimUpdate)
			q, args, _ = p.ZombieResetSQL(zombie, 500)
			check(t, "zombie reset", q, args, c.zombie)
			q, args = p.ArchiveDeleteSQL(retain, 1000)
			check(t, "archive delete", q, args, c.archiveDelete)
			q, args = p.ArchiveSelectSQL(retain, 1000)
			check(t, "archive select", q, args, c.archiveSelect)
			q, args, err = p.RequeueIDsSQL(outboxsql.RequeueMatch{Since: time.Hour, IDs: []string{"7", "9"}}, 3)
			if c.requeu.sql == "" {
				if err == nil {
					t.Errorf("requeue: want an error for a table without a failed status, got %s", q)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			check(t, "requeue", q, args, c.requeu)
		})
	}
}

func TestArchiveCopySQL(t *testing.T) {
	p, err := newPlan(table(t, "producer-message", nil))
	if err != nil {
		t.Fatal(err)
	}
	p.ArchiveTable = "`app`.`producer_message_archive`"
	p.ArchiveCols = []string{"id", "message_id", "content"}
	want := "INSERT INTO `app`.`producer_message_archive` (`id`, `message_id`, `content`) SELECT `id`, `message_id`, `content` FROM `app`.`producer_message` WHERE `id` IN (?,?,?)"
	if got := p.ArchiveCopySQL(3); got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
	if got, want := p.DeleteIDsSQL(2), "DELETE FROM `app`.`producer_message` WHERE `id` IN (?,?)"; got != want {
		t.Errorf("\n got %s\nwant %s", got, want)
	}
}

func TestRequeueWithoutFilters(t *testing.T) {
	p, _ := newPlan(table(t, "producer-message", nil))
	q, args, err := p.RequeueNextSQL(outboxsql.RequeueMatch{}, nil, 1000)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "requeue's first batch", q, args, stmt{"SELECT `id` FROM `app`.`producer_message` WHERE `status` = 'FAILED' ORDER BY `id` LIMIT ?", []any{1000}})
	q, args, err = p.RequeueIDsSQL(outboxsql.RequeueMatch{}, 2)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "requeue", q, args, stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `retry_count` = 0, `next_retry_time` = NOW(3), `version` = `version` + 1, `update_time` = NOW(3) WHERE `status` = 'FAILED' AND `id` IN (?,?)", nil})
}

func TestTablesNotSwept(t *testing.T) {
	for name, tb := range map[string]*outbox.Table{
		"no status column (debezium)": table(t, "debezium", nil),
		"no created_at":               table(t, "producer-message", func(tb *outbox.Table) { tb.Columns.CreatedAt = "" }),
	} {
		if _, err := newPlan(tb); !errors.Is(err, errNotSweepable) {
			t.Errorf("%s: got %v, want not swept", name, err)
		}
	}
}

func TestClaimedRowMatchesTheBinlogDecoding(t *testing.T) {
	tb := table(t, "producer-message", func(tb *outbox.Table) {
		tb.Columns.Headers = []string{"create_time"}
		tb.Route.TimeZone = "Asia/Shanghai"
	})
	p, _ := newPlan(tb)
	p.Cols = []string{"id", "message_id", "retry_count", "max_retry_count", "version", "create_time"}
	wall := time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC) // the driver labels a DATETIME UTC
	c := p.claimedRow([]any{int64(42), []byte("m-1"), []byte("2"), int64(5), int64(7), wall},
		[]bool{false, false, false, false, false, true})
	if c.row.ID != int64(42) || c.retries != 2 || c.maxRetries != 5 || c.version != 7 {
		t.Errorf("id %v retries %d max %d version %d", c.row.ID, c.retries, c.maxRetries, c.version)
	}
	got := c.row.Values["create_time"].(time.Time)
	if got.Location().String() != "Asia/Shanghai" || got.Hour() != 10 {
		t.Errorf("DATETIME read as %v, want 10:00 wall clock in Asia/Shanghai", got)
	}
	// A string primary key (Eventuate) is kept as a string.
	ev, _ := newPlan(table(t, "eventuate", nil))
	ev.Cols = []string{"id"}
	if c := ev.claimedRow([]any{[]byte("0000-abc")}, []bool{false}); c.row.ID != "0000-abc" {
		t.Errorf("eventuate id %#v", c.row.ID)
	}
}

// A console failure group is requeued by its exact error text (NULL and
// empty are one group), and its dry run counts the same rows.
func TestRequeueByErrorText(t *testing.T) {
	p, _ := newPlan(table(t, "producer-message", nil))
	reason := "no exchange 'x'"
	q, args, err := p.RequeueNextSQL(outboxsql.RequeueMatch{Error: &reason}, int64(41), 1000)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "requeue's batch after id 41", q, args, stmt{"SELECT `id` FROM `app`.`producer_message` WHERE `status` = 'FAILED' AND `error_msg` = ? AND `id` > ? ORDER BY `id` LIMIT ?", []any{reason, int64(41), 1000}})
	q, args, err = p.RequeueIDsSQL(outboxsql.RequeueMatch{Error: &reason}, 1)
	if err != nil {
		t.Fatal(err)
	}
	check(t, "requeue", q, args, stmt{"UPDATE `app`.`producer_message` SET `status` = 'PENDING', `retry_count` = 0, `next_retry_time` = NOW(3), `version` = `version` + 1, `update_time` = NOW(3) WHERE `status` = 'FAILED' AND `error_msg` = ? AND `id` IN (?)", []any{reason}})
	none := ""
	q, args, err = p.RequeueCountSQL(outboxsql.RequeueMatch{Error: &none, IDs: []string{"4"}})
	if err != nil {
		t.Fatal(err)
	}
	check(t, "count", q, args, stmt{"SELECT COUNT(*) FROM `app`.`producer_message` WHERE `status` = 'FAILED' AND `id` IN (?) AND (`error_msg` IS NULL OR `error_msg` = '')", []any{"4"}})
	noErr, _ := newPlan(table(t, "local-message", nil))
	if _, _, err := noErr.RequeueIDsSQL(outboxsql.RequeueMatch{Error: &reason}, 10); err == nil || !strings.Contains(err.Error(), "columns.error") {
		t.Errorf("a table without an error column: %v", err)
	}
}
