// Package rowstatus writes outbox row statuses on the primary: batched SENT
// marks for the binlog path, and the retry/FAILED bookkeeping for rows that
// could not be published.
package rowstatus

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Writer runs status statements against the primary.
type Writer struct {
	DB    *sql.DB
	Retry Retry
	// Image is the row image the SENT marks are logged with: ImageMinimal
	// on a session of their own where the grants allow (markimage.go),
	// anything else FULL, as the server logs by default.
	Image string
	// Sessions is the most SENT marks run at once, each on a connection
	// of its own (the relay marks the tables of one batch side by side,
	// relay.mark_sessions); 0 means 1.
	Sessions int

	limits errorLimits // the error columns' lengths (errtext.go)
	once   sync.Once
	pool   *markSessions // the marks' connections (markimage.go)
}

// NewWriter builds a writer.
func NewWriter(db *sql.DB, b Retry) *Writer {
	b.Defaults()
	return &Writer{DB: db, Retry: b}
}

// MarkSent marks rows SENT in one statement. Only rows still in a
// publishable status move, so a row a sweeper or operator changed meanwhile
// is left alone. Tables without a status column need no write.
func (w *Writer) MarkSent(ctx context.Context, t *outbox.Table, m Marks) (int64, error) {
	ids := m.IDs
	if t.Columns.Status == "" || len(ids) == 0 {
		return 0, nil
	}
	q, args := outboxsql.MarkSentSQL(t, len(ids), t.Statuses.Publishable, false), ids
	if m.Guarded(t) {
		q, args = outboxsql.MarkSentGuardedSQL(t, len(ids), t.Statuses.Publishable), append(append([]any(nil), ids...), m.MessageIDs...)
	}
	res, err := w.execMark(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("marking %d rows of %s sent: %w", len(ids), t.FullName(), err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// Marks are published rows to mark SENT: their ids and, beside them, their
// message ids. Where the table has a message-id column of its own, a mark
// moves a row only when both match, so a mark that reaches another table
// under the outbox table's name (after a RENAME, or a table dropped and
// created again, whose ids start over) cannot move a row that has not been
// published.
type Marks struct {
	IDs, MessageIDs []any
}

// Add appends one row's id and message id.
func (m *Marks) Add(id, messageID any) {
	m.IDs = append(m.IDs, id)
	m.MessageIDs = append(m.MessageIDs, messageID)
}

// Guarded reports whether the marks are matched by message id too: the
// table has a message-id column apart from its id, and every row has one.
// Only guarded marks may go to a table that can hold other rows under the
// same ids.
func (m Marks) Guarded(t *outbox.Table) bool {
	if !OwnMessageID(t) || len(m.MessageIDs) != len(m.IDs) {
		return false
	}
	for _, v := range m.MessageIDs {
		if v == nil {
			return false
		}
	}
	return true
}

// OwnMessageID reports whether t has a message-id column apart from its
// id, which marks can be matched by.
func OwnMessageID(t *outbox.Table) bool {
	c := t.Columns
	return c.MessageID != "" && !strings.EqualFold(c.MessageID, c.ID)
}

// Attempt is a failed publish of one row.
type Attempt struct {
	ID any
	// Retries is the row's retry count before this attempt.
	Retries int
	// MaxRetries is the row's max retry count (or the table's).
	MaxRetries int
	Reason     string
	// FromStatuses are the statuses the row may be in for the write to apply
	// (optimistic: a row someone else moved is left alone).
	FromStatuses []string
	// Version, when the table has a version column and HasVersion is set,
	// makes the write version-checked.
	Version    int64
	HasVersion bool
	// Permanent: retrying cannot help (the row itself cannot be
	// published); FAILED at once where the table has a failed status.
	Permanent bool
	// Repeat: the attempt was recorded once already, maybe elsewhere (the
	// relay writes it again where a rename moved the row); it applies only
	// to rows still at Retries, so a row the first write reached is not
	// counted twice (a table without a retry count has nothing to count).
	Repeat bool
}

// Outcome tells what MarkRetry did.
type Outcome int

const (
	// Skipped: the row was not in an expected state (someone else moved it).
	Skipped Outcome = iota
	// Retrying: back to PENDING with a later next_retry_time.
	Retrying
	// Failed: max retries reached, FAILED with the reason.
	Failed
)

// Execer runs a statement: the *sql.DB, or a transaction that holds the
// rows' locks (the sweeper settles its claims in one).
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// MarkClaimedSent marks rows a sweeper claimed SENT in one statement. Only
// rows still in one of the from statuses move and, when the table has a
// version column and version is given, only those still at that version:
// a row someone else took over meanwhile is left alone.
func (w *Writer) MarkClaimedSent(ctx context.Context, ex Execer, t *outbox.Table, ids []any, from []string, version *int64) (int64, error) {
	c := t.Columns
	if c.Status == "" || len(ids) == 0 {
		return 0, nil
	}
	versioned := version != nil && c.Version != ""
	q := outboxsql.MarkSentSQL(t, len(ids), from, versioned)
	args := ids
	if versioned {
		args = append(append([]any(nil), ids...), *version)
	}
	res, err := ex.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("marking %d claimed rows of %s sent: %w", len(ids), t.FullName(), err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

// MarkRetry records a failed publish: retry_count+1, next_retry_time =
// now + backoff and the reason; FAILED once the retries are used up.
func (w *Writer) MarkRetry(ctx context.Context, t *outbox.Table, a Attempt) (Outcome, error) {
	return w.MarkRetryOn(ctx, w.DB, t, a)
}

// MarkRetryOn is MarkRetry run on ex (a transaction holding the row's lock).
func (w *Writer) MarkRetryOn(ctx context.Context, ex Execer, t *outbox.Table, a Attempt) (Outcome, error) {
	out, n, err := w.markRetry(ctx, ex, t, a, []any{a.ID}, nil)
	if err != nil {
		return Skipped, fmt.Errorf("recording failed publish of %s id %v: %w", t.FullName(), a.ID, err)
	}
	if n == 0 {
		return Skipped, nil
	}
	return out, nil
}

// MarkRetryMany records the same failed attempt (same reason, retry count
// and limit; a.ID and the version check are ignored) for several rows in
// one statement, as the binlog path does for a run of rows to one missing
// exchange; like MarkSent, it matches the message ids too where m is
// Guarded. It returns what the rows became and how many moved (rows no
// longer in a.FromStatuses are left alone).
func (w *Writer) MarkRetryMany(ctx context.Context, t *outbox.Table, a Attempt, m Marks) (Outcome, int64, error) {
	a.HasVersion = false
	var msgIDs []any
	if m.Guarded(t) {
		msgIDs = m.MessageIDs
	}
	out, n, err := w.markRetry(ctx, w.DB, t, a, m.IDs, msgIDs)
	if err != nil {
		return Skipped, 0, fmt.Errorf("recording failed publish of %d rows of %s: %w", len(m.IDs), t.FullName(), err)
	}
	return out, n, nil
}

// TableMissing reports whether err says the statement's table does not
// exist (ER_NO_SUCH_TABLE): dropped, or renamed with nothing in its place
// yet; or its schema does not (ER_BAD_DB_ERROR: MySQL's answer about a
// table of a dropped database, a tenant's DROP DATABASE). Such a table has
// no rows to mark.
func TableMissing(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == erNoSuchTable || me.Number == erBadDB)
}

const (
	erNoSuchTable = 1146 // ER_NO_SUCH_TABLE
	erBadDB       = 1049 // ER_BAD_DB_ERROR
)

func (w *Writer) markRetry(ctx context.Context, ex Execer, t *outbox.Table, a Attempt, ids, msgIDs []any) (Outcome, int64, error) {
	c := t.Columns
	if c.Status == "" || len(ids) == 0 {
		// Nothing to record in a table without status (Debezium style):
		// the caller must not skip the row.
		return Skipped, 0, nil
	}
	pending := t.Statuses.RetryValue()
	out, status := Retrying, pending
	if a.Retries+1 >= a.MaxRetries || pending == "" || a.Permanent {
		out, status = Failed, t.Statuses.Failed
	}
	if status == "" {
		// The table has no FAILED value (eventuate's published 0/1): leave
		// the row pending for the sweeper.
		out, status = Retrying, pending
	}
	if status == "" {
		// Validation refuses such statuses; never write an empty status.
		return Skipped, 0, errors.New("no status to write (statuses.pending and statuses.failed are empty)")
	}
	r := outboxsql.Retry{Status: status, Retrying: out == Retrying, IDs: ids, MessageIDs: msgIDs, From: a.FromStatuses}
	if r.Retrying {
		r.Delay = w.Retry.Delay(a.Retries)
	}
	if c.Error != "" {
		r.Reason = w.FitError(ctx, t, a.Reason)
	}
	if a.HasVersion {
		r.Version = &a.Version
	}
	if a.Repeat {
		r.RetriesWere = &a.Retries
	}
	q, args := outboxsql.MarkRetrySQL(t, r)
	res, err := ex.ExecContext(ctx, q, args...)
	if err != nil {
		return Skipped, 0, err
	}
	n, _ := res.RowsAffected()
	return out, n, nil
}
