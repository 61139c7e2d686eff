// Package outboxsql builds every statement the relay runs over outbox rows
// from a mapped outbox.Table: the status command, the backlog metrics, the
// status writer, the sweeper and reconcile's repair all ask here, so one
// mapping gives one SQL everywhere. It also turns a row read by SQL into the
// outbox.Row the binlog reader would have decoded.
package outboxsql

import (
	"fmt"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// This file and sql_*.go hold every statement the relay runs over outbox
// rows, built from the mapped Table: the status command, the backlog
// metrics, the status writer, the sweeper and reconcile's repair all ask
// here, so one mapping gives one SQL everywhere.

// RetriedFrom is the retry_count from which a row counts as retried in the
// retry ratio (the status command and outbox_retry_ratio), and
// RetryRatioWindow the span of recently updated rows the ratio covers.
const (
	RetriedFrom      = 3
	RetryRatioWindow = time.Hour
)

func q(col string) string { return ident.Quote(col) }

// quoteAll quotes each of cols and joins them with ", ".
func quoteAll(cols []string) string {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = q(c)
	}
	return strings.Join(quoted, ", ")
}

// StatusIn is the condition "status is one of vs".
func StatusIn(t *outbox.Table, vs []string) string {
	status := q(t.Columns.Status)
	if len(vs) == 1 {
		return status + " = " + SQLValue(&t.Statuses, vs[0])
	}
	return status + " IN (" + SQLList(&t.Statuses, vs) + ")"
}

// bookkeeping is version+1 and updated_at = now, for the columns the table
// has: every write that moves a row sets them.
func bookkeeping(t *outbox.Table) []string {
	var sets []string
	if v := t.Columns.Version; v != "" {
		sets = append(sets, fmt.Sprintf("%[1]s = %[1]s + 1", q(v)))
	}
	if u := t.Columns.UpdatedAt; u != "" {
		sets = append(sets, q(u)+" = NOW(3)")
	}
	return sets
}

// updatedWithin selects rows updated (created, without updated_at) within
// d, by the server's clock.
func updatedWithin(t *outbox.Table, d time.Duration) (string, any) {
	if u := t.Columns.UpdatedAt; u != "" {
		return q(u) + " >= NOW(3) - INTERVAL ? MICROSECOND", d.Microseconds()
	}
	created, arg, _ := CreatedBefore(t, d)
	return "NOT (" + created + ")", arg
}

// CountByStatusSQL reads (status, rows) pairs, for the statuses in only (all
// when only is empty): a range on the status index.
func CountByStatusSQL(t *outbox.Table, only []string) string {
	where := ""
	if len(only) > 0 {
		where = " WHERE " + StatusIn(t, only)
	}
	return fmt.Sprintf("SELECT %[1]s, COUNT(*) FROM %[2]s%[3]s GROUP BY %[1]s ORDER BY %[1]s", q(t.Columns.Status), QuotedName(t), where)
}

// OldestAgeSQL reads how long ago, in seconds by the server's clock, the
// oldest row in statuses was created: NULL when there is none, never below
// 0. The age is taken on the server, so neither the relay's clock nor its
// time zone matters, and an epoch column is read in its unit
// (created_at_epoch), not guessed.
func OldestAgeSQL(t *outbox.Table, statuses []string) string {
	return fmt.Sprintf("SELECT GREATEST(%s, 0) FROM %s WHERE %s", oldestAge(t), QuotedName(t), StatusIn(t, statuses))
}

// oldestAge is the age in seconds of the oldest row of a group, by its
// created column.
func oldestAge(t *outbox.Table) string {
	c := q(t.Columns.CreatedAt)
	switch t.CreatedAtEpoch {
	case "ms":
		return fmt.Sprintf("UNIX_TIMESTAMP(NOW(3)) - MIN(%s) / 1000", c)
	case "s":
		return fmt.Sprintf("UNIX_TIMESTAMP(NOW(3)) - MIN(%s)", c)
	}
	return fmt.Sprintf("TIMESTAMPDIFF(MICROSECOND, MIN(%s), NOW(6)) / 1e6", c)
}

// RetryRatioSQL reads how many rows were updated within RetryRatioWindow and
// how many of them were retried RetriedFrom times or more. statuses, when
// given, limits it to rows in them, so it is a range on (status,
// updated_at); the table needs a retry_count column.
func RetryRatioSQL(t *outbox.Table, statuses []string) (string, []any) {
	return retryRatio(t, statuses, "")
}

// RetryRatioTaggedSQL is RetryRatioSQL with tag selected first, so the
// statements of several tables join with UNION ALL into one (the backlog
// gauges of many tables).
func RetryRatioTaggedSQL(t *outbox.Table, statuses []string, tag int) (string, []any) {
	return retryRatio(t, statuses, fmt.Sprintf("%d, ", tag))
}

func retryRatio(t *outbox.Table, statuses []string, first string) (string, []any) {
	recent, arg := updatedWithin(t, RetryRatioWindow)
	if len(statuses) > 0 {
		recent = StatusIn(t, statuses) + " AND " + recent
	}
	return fmt.Sprintf("SELECT %sCOUNT(*), COALESCE(SUM(%s >= %d), 0) FROM %s WHERE %s",
		first, q(t.Columns.RetryCount), RetriedFrom, QuotedName(t), recent), []any{arg}
}

// BacklogSQL reads one table's backlog in one statement, tag selected
// first so the statements of several tables join with UNION ALL: for each
// status in only, (tag, the status as text, rows, seconds since the oldest
// row's creation by the server's clock, NULL without a created column).
// The same ranges on the status index as CountByStatusSQL and OldestAgeSQL.
func BacklogSQL(t *outbox.Table, only []string, tag int) string {
	status, age := q(t.Columns.Status), "NULL"
	if t.Columns.CreatedAt != "" {
		age = "GREATEST(" + oldestAge(t) + ", 0)"
	}
	return fmt.Sprintf("SELECT %d, CONVERT(%s USING utf8mb4), COUNT(*), %s FROM %s WHERE %s GROUP BY %s",
		tag, status, age, QuotedName(t), StatusIn(t, only), status)
}
