package outboxsql

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// The console's reads (internal/console): failure groups and the rows of
// one, asked of the source replica. Each is a range on the status index
// (idx_status_next_retry style: status first) with a LIMIT, so its cost
// follows the failed and retrying rows, never the table's size.

// ErrorTextLen is how much of the error column a failure group is told
// apart by: the relay writes at most this many characters
// (rowstatus's cap), so its reasons are whole.
const ErrorTextLen = 1000

// Failure states a console group is in.
const (
	StateFailed   = "failed"   // statuses.failed: only an operator sends it again
	StateRetrying = "retrying" // back to pending after a failed publish, retry_count above 0
)

// FailureStates lists the states t can show: failed with a failed status,
// retrying with a retry_count column. None without a status column.
func FailureStates(t *outbox.Table) []string {
	var out []string
	if t.Columns.Status == "" {
		return nil
	}
	if t.Statuses.Failed != "" {
		out = append(out, StateFailed)
	}
	if t.Columns.RetryCount != "" && t.Statuses.RetryValue() != "" {
		out = append(out, StateRetrying)
	}
	return out
}

// stateCond is the condition selecting the rows of t in state.
func stateCond(t *outbox.Table, state string) string {
	if state == StateFailed {
		return StatusIn(t, []string{t.Statuses.Failed})
	}
	return StatusIn(t, []string{t.Statuses.RetryValue()}) + " AND " + q(t.Columns.RetryCount) + " > 0"
}

// seenExpr is when a row last changed, as a DATETIME: updated_at, else
// created_at (converted from an epoch count); "NULL" without either.
func seenExpr(t *outbox.Table) string {
	if u := t.Columns.UpdatedAt; u != "" {
		return q(u)
	}
	c := t.Columns.CreatedAt
	switch {
	case c == "":
		return "NULL"
	case t.CreatedAtEpoch == "ms":
		return "FROM_UNIXTIME(" + q(c) + " / 1000)"
	case t.CreatedAtEpoch == "s":
		return "FROM_UNIXTIME(" + q(c) + ")"
	}
	return q(c)
}

func errorExpr(t *outbox.Table) string {
	if e := t.Columns.Error; e != "" {
		return fmt.Sprintf("LEFT(%s, %d)", q(e), ErrorTextLen)
	}
	return "NULL"
}

// FailureGroupsSQL groups the failed and retrying rows of t by state and
// error text: state, a hash of the error text (SHA-256, NULL and empty
// alike; MySQL 9 has no MD5()),
// rows, first and last seen, earliest next retry, and the lowest id, whose
// text FailureTextsSQL reads. It reads at most scan rows (the inner LIMIT;
// rows = scan means there may be more) and returns at most groups groups,
// largest first. ok is false when t has no state to show.
//
// The texts are not carried through the grouping: a 1,000-character
// utf8mb4 text makes each grouped row up to 4,000 bytes, its hash 64.
func FailureGroupsSQL(t *outbox.Table, scan, groups int) (query string, args []any, ok bool) {
	states := FailureStates(t)
	if len(states) == 0 {
		return "", nil, false
	}
	stateCase, where := "'"+StateFailed+"'", ""
	switch {
	case len(states) == 2:
		// One range over both status values, then the retry_count filter:
		// an OR of the two conditions can keep the optimizer off the index.
		stateCase = fmt.Sprintf("CASE WHEN %s THEN '%s' ELSE '%s' END", StatusIn(t, []string{t.Statuses.Failed}), StateFailed, StateRetrying)
		where = fmt.Sprintf("%s AND (%s OR %s > 0)", StatusIn(t, []string{t.Statuses.Failed, t.Statuses.RetryValue()}),
			StatusIn(t, []string{t.Statuses.Failed}), q(t.Columns.RetryCount))
	case states[0] == StateFailed:
		where = stateCond(t, StateFailed)
	default:
		stateCase, where = "'"+StateRetrying+"'", stateCond(t, StateRetrying)
	}
	nrt := "NULL"
	if c := t.Columns.NextRetryTime; c != "" {
		nrt = q(c)
	}
	hash := "''"
	if t.Columns.Error != "" {
		hash = "SHA2(COALESCE(" + errorExpr(t) + ", ''), 256)"
	}
	return fmt.Sprintf("SELECT g.st, g.h, COUNT(*), MIN(g.seen), MAX(g.seen), MIN(g.nrt), MIN(g.id) FROM ("+
		"SELECT %s AS st, %s AS h, %s AS seen, %s AS nrt, %s AS id FROM %s WHERE %s LIMIT ?"+
		") g GROUP BY g.st, g.h ORDER BY COUNT(*) DESC, g.st, g.h LIMIT ?",
		stateCase, hash, seenExpr(t), nrt, q(t.Columns.ID), QuotedName(t), where), []any{scan, groups}, true
}

// FailureTextsSQL reads the error text of n rows by id: (id, text), one
// primary-key lookup each (a group's lowest id from FailureGroupsSQL).
func FailureTextsSQL(t *outbox.Table, n int) string {
	return fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s IN (%s)", q(t.Columns.ID), errorExpr(t), QuotedName(t),
		q(t.Columns.ID), strings.TrimSuffix(strings.Repeat("?,", n), ","))
}

// FailureRowsSQL reads one page of a failure group's rows, by id after
// after ("" for the first page): cols (the table's columns, for the
// router and the page), then the error text, the last change and the next
// retry. errText nil matches any error; "" matches none (NULL or empty).
func FailureRowsSQL(t *outbox.Table, cols []string, state string, errText *string, after string, n int) (string, []any) {
	where := stateCond(t, state)
	var args []any
	if errText != nil && t.Columns.Error != "" {
		if *errText == "" {
			where += fmt.Sprintf(" AND (%[1]s IS NULL OR %[1]s = '')", q(t.Columns.Error))
		} else {
			where += " AND " + errorExpr(t) + " = ?"
			args = append(args, *errText)
		}
	}
	if after != "" {
		where += " AND " + q(t.Columns.ID) + " > ?"
		args = append(args, IDArg(after))
	}
	nrt := "NULL"
	if c := t.Columns.NextRetryTime; c != "" {
		nrt = q(c)
	}
	return fmt.Sprintf("SELECT %s, %s, %s, %s FROM %s WHERE %s ORDER BY %s LIMIT ?", quoteAll(cols), errorExpr(t), seenExpr(t), nrt,
		QuotedName(t), where, q(t.Columns.ID)), append(args, n)
}

// RowColumns are the columns the console reads of a row: every mapped
// one the router needs, without the payload unless withPayload, and
// without the bookkeeping FailureRowsSQL adds itself.
func RowColumns(t *outbox.Table, withPayload bool) []string {
	skip := map[string]bool{"columns.error": true, "columns.created_at": true, "columns.updated_at": true, "columns.next_retry_time": true}
	if !withPayload {
		skip["columns.payload"] = true
	}
	var out []string
	for field, col := range t.MappedColumns() {
		if !skip[field] && !slices.Contains(out, col) {
			out = append(out, col)
		}
	}
	if !slices.Contains(out, t.Columns.ID) {
		out = append(out, t.Columns.ID)
	}
	slices.Sort(out)
	return out
}

// IDArg is an id from a URL as a query argument: an integer stays one, so
// a BIGINT key is compared as a number (a string would be compared as a
// DOUBLE, which cannot tell snowflake ids apart).
func IDArg(id string) any {
	if n, err := strconv.ParseInt(strings.TrimSpace(id), 10, 64); err == nil {
		return n
	}
	if n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64); err == nil {
		return n
	}
	return id
}
