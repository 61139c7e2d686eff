package outbox

import (
	"fmt"
	"strconv"
	"strings"
	"time"
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

// Placeholders is n comma-separated "?".
func Placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

func q(col string) string { return QuoteIdent(col) }

// quoteAll quotes each of cols and joins them with ", ".
func quoteAll(cols []string) string {
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = q(c)
	}
	return strings.Join(quoted, ", ")
}

// StatusIn is the condition "status is one of vs".
func (t *Table) StatusIn(vs []string) string {
	status := q(t.Columns.Status)
	if len(vs) == 1 {
		return status + " = " + t.Statuses.SQLValue(vs[0])
	}
	return status + " IN (" + t.Statuses.SQLList(vs) + ")"
}

// bookkeeping is version+1 and updated_at = now, for the columns the table
// has: every write that moves a row sets them.
func (t *Table) bookkeeping() []string {
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
func (t *Table) updatedWithin(d time.Duration) (string, any) {
	if u := t.Columns.UpdatedAt; u != "" {
		return q(u) + " >= NOW(3) - INTERVAL ? MICROSECOND", d.Microseconds()
	}
	created, arg, _ := t.CreatedBefore(d)
	return "NOT (" + created + ")", arg
}

// CountByStatusSQL reads (status, rows) pairs, for the statuses in only (all
// when only is empty): a range on the status index.
func (t *Table) CountByStatusSQL(only []string) string {
	where := ""
	if len(only) > 0 {
		where = " WHERE " + t.StatusIn(only)
	}
	return fmt.Sprintf("SELECT %[1]s, COUNT(*) FROM %[2]s%[3]s GROUP BY %[1]s ORDER BY %[1]s", q(t.Columns.Status), t.QuotedName(), where)
}

// OldestCreatedSQL reads the oldest created_at among rows in statuses and
// the server's NOW(6), for CreatedAge.
func (t *Table) OldestCreatedSQL(statuses []string) string {
	return fmt.Sprintf("SELECT MIN(%s), NOW(6) FROM %s WHERE %s", q(t.Columns.CreatedAt), t.QuotedName(), t.StatusIn(statuses))
}

// RetryRatioSQL reads how many rows were updated within RetryRatioWindow and
// how many of them were retried RetriedFrom times or more. statuses, when
// given, limits it to rows in them, so it is a range on (status,
// updated_at); the table needs a retry_count column.
func (t *Table) RetryRatioSQL(statuses []string) (string, []any) {
	recent, arg := t.updatedWithin(RetryRatioWindow)
	if len(statuses) > 0 {
		recent = t.StatusIn(statuses) + " AND " + recent
	}
	return fmt.Sprintf("SELECT COUNT(*), COALESCE(SUM(%s >= %d), 0) FROM %s WHERE %s",
		q(t.Columns.RetryCount), RetriedFrom, t.QuotedName(), recent), []any{arg}
}

// CreatedAge is how old a created-at value read by OldestCreatedSQL is
// against the server's NOW(6) read with it: a DATETIME/TIMESTAMP is compared
// with the server's clock (so the relay's clock and time zone do not
// matter); an epoch number (Eventuate's creation_time is milliseconds;
// seconds are recognised by size) with the local clock. NULL (no row) is 0.
func CreatedAge(created, now any) time.Duration {
	c, isEpoch, ok := asTime(created)
	if !ok {
		return 0
	}
	n, _, ok := asTime(now)
	if isEpoch || !ok {
		n = time.Now()
	}
	if d := n.Sub(c); d > 0 {
		return d
	}
	return 0
}

func asTime(v any) (t time.Time, isEpoch, ok bool) {
	switch x := v.(type) {
	case time.Time:
		return x, false, true
	case int64:
		return epoch(x), true, true
	case []byte:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return epoch(i), true, true
		}
		if t, err := time.Parse("2006-01-02 15:04:05.999999", string(x)); err == nil {
			return t, false, true
		}
	}
	return time.Time{}, false, false
}

func epoch(v int64) time.Time {
	if v > 1e12 { // milliseconds
		return time.UnixMilli(v)
	}
	return time.Unix(v, 0)
}
