package outboxsql

import (
	"fmt"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// MarkSentSQL is UPDATE ... SET status = SENT WHERE id IN (n ids) AND
// status IN (from), with version+1 and updated_at = NOW(3) when the table
// has them. With versioned (and a version column), one more argument after
// the ids: the version the rows must still be at.
func MarkSentSQL(t *outbox.Table, n int, from []string, versioned bool) string {
	c := t.Columns
	sets := append([]string{q(c.Status) + " = " + SQLValue(&t.Statuses, t.Statuses.Sent)}, bookkeeping(t)...)
	s := fmt.Sprintf("UPDATE %s SET %s WHERE %s IN (%s) AND %s IN (%s)", QuotedName(t), strings.Join(sets, ", "),
		q(c.ID), ident.Placeholders(n), q(c.Status), SQLList(&t.Statuses, from))
	if versioned && c.Version != "" {
		s += fmt.Sprintf(" AND %s = ?", q(c.Version))
	}
	return s
}

// MarkSentGuardedSQL is MarkSentSQL matching the message ids as well:
// the n ids, then the n message ids (status.Marks).
func MarkSentGuardedSQL(t *outbox.Table, n int, from []string) string {
	c := t.Columns
	sets := append([]string{q(c.Status) + " = " + SQLValue(&t.Statuses, t.Statuses.Sent)}, bookkeeping(t)...)
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s IN (%s) AND %s IN (%s) AND %s IN (%s)", QuotedName(t), strings.Join(sets, ", "),
		q(c.ID), ident.Placeholders(n), q(c.MessageID), ident.Placeholders(n), q(c.Status), SQLList(&t.Statuses, from))
}

// Retry is a failed publish to record on rows: the status they move to,
// and, while they are retried, the delay before the next attempt.
type Retry struct {
	Status   string        // the status value written
	Retrying bool          // next_retry_time = now + Delay (a FAILED row keeps its own)
	Delay    time.Duration //
	Reason   string        // the error column's text, already cut to fit
	IDs      []any
	// MessageIDs, when set, are the rows' message ids, matched as well
	// (rowstatus.Marks).
	MessageIDs []any
	// From are the statuses the rows must still be in (none: any).
	From []string
	// Version, when set and the table has a version column, is the version
	// the row must still be at.
	Version *int64
	// RetriesWere, when set and the table has a retry count, is the count
	// the rows must still be at (a record written again moves only the
	// rows the first write did not reach).
	RetriesWere *int
}

// MarkRetrySQL records a failed publish: status, retry_count+1,
// next_retry_time (retrying only), the reason, version+1 and updated_at, for
// the ids (with r.MessageIDs) still in r.From (and at r.Version).
func MarkRetrySQL(t *outbox.Table, r Retry) (string, []any) {
	c := t.Columns
	sets := []string{q(c.Status) + " = " + SQLValue(&t.Statuses, r.Status)}
	var args []any
	if c.RetryCount != "" {
		sets = append(sets, fmt.Sprintf("%[1]s = %[1]s + 1", q(c.RetryCount)))
	}
	if c.NextRetryTime != "" && r.Retrying {
		// Server time, like the application's own DEFAULT CURRENT_TIMESTAMP,
		// so comparisons with NOW() agree whatever the session time zone.
		sets = append(sets, q(c.NextRetryTime)+" = NOW(3) + INTERVAL ? MICROSECOND")
		args = append(args, r.Delay.Microseconds())
	}
	if c.Error != "" {
		sets = append(sets, q(c.Error)+" = ?")
		args = append(args, r.Reason)
	}
	sets = append(sets, bookkeeping(t)...)
	where := q(c.ID) + " = ?"
	if len(r.IDs) > 1 {
		where = fmt.Sprintf("%s IN (?%s)", q(c.ID), strings.Repeat(", ?", len(r.IDs)-1))
	}
	args = append(args, r.IDs...)
	if len(r.MessageIDs) > 0 {
		where += fmt.Sprintf(" AND %s IN (%s)", q(c.MessageID), ident.Placeholders(len(r.MessageIDs)))
		args = append(args, r.MessageIDs...)
	}
	if len(r.From) > 0 {
		where += fmt.Sprintf(" AND %s IN (%s)", q(c.Status), SQLList(&t.Statuses, r.From))
	}
	if r.Version != nil && c.Version != "" {
		where += fmt.Sprintf(" AND %s = ?", q(c.Version))
		args = append(args, *r.Version)
	}
	if r.RetriesWere != nil && c.RetryCount != "" {
		where += fmt.Sprintf(" AND %s = ?", q(c.RetryCount))
		args = append(args, *r.RetriesWere)
	}
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s", QuotedName(t), strings.Join(sets, ", "), where), args
}

// SentAmongSQL reads which of n ids are SENT now: their id and what tells
// the message under the id apart (rowstatus.Fingerprint): the message id
// where the table has a column of its own, else the payload's CRC32. The
// relay asks it of the source replica when it replays rows after a restart.
func SentAmongSQL(t *outbox.Table, n int) string {
	c := t.Columns
	cols := q(c.ID)
	switch {
	case c.MessageID != "" && !strings.EqualFold(c.MessageID, c.ID):
		cols += ", " + q(c.MessageID)
	case c.Payload != "":
		cols += ", CRC32(" + q(c.Payload) + ")"
	}
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s IN (%s) AND %s = %s", cols, QuotedName(t),
		q(c.ID), ident.Placeholders(n), q(c.Status), SQLValue(&t.Statuses, t.Statuses.Sent))
}
