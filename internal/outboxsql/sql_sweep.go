package outboxsql

import (
	"fmt"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Sweep builds the statements a sweeper runs over one table's rows: the
// replica's look, the claim, zombie reset, archive, requeue and the reset of
// SENT rows. The sweeper decides which statuses a due and a claimed row are
// in and how a claim holds its rows; Sweep turns that into SQL.
type Sweep struct {
	T       *outbox.Table
	Pending []string // statuses a due row is in; Pending[0] is written back
	Claimed []string // statuses a claimed row is in
	// ClaimSending: the claim moves rows to SENDING (version+1), so a row
	// can be left there by a sweeper that died (a zombie). It needs
	// updated_at or next_retry_time to date the claim by.
	ClaimSending bool
	Cols         []string // columns read to publish a row

	// For archive.mode move.
	ArchiveTable string   // quoted `schema`.`name`
	ArchiveCols  []string // the outbox table's columns, in order
}

// requeueSlack is how much later than a row's last write its
// next_retry_time must be for the sweeper to take the row as scheduled (a
// retry, a re-queue left for later) rather than as re-queued for now: the
// binlog path publishes a re-queue whose next_retry_time is within a second
// of its commit (pkg/binlog's retryDue), and the commit comes a little after
// the statement's NOW().
const requeueSlack = 2 * time.Second

// due selects rows a sweeper may take: pending, older than the grace
// period, and with next_retry_time (when the table has one) unset or past.
//
// A row put back to pending (the application's UPDATE back to PENDING, an
// upsert, REPLACE, binlog-relay requeue, reconcile --repair) is published
// by the binlog path at once, as an insert is, and the sweeper taking it as
// well would publish it twice; such a row keeps its old created_at. So:
//
//   - with updated_at, a row written within the grace period waits, unless
//     that write scheduled it (next_retry_time more than requeueSlack after
//     updated_at: the relay's retries, a re-queue left for later, which the
//     binlog path does not publish);
//   - with retry_count, a row never attempted (0) that has a next_retry_time
//     waits the grace period from that time too (a table whose updated_at
//     is not set on every write still tells binlog-relay requeue's resets).
//
// A table with neither, or a re-queue that sets neither, cannot tell a
// re-queue from a row the binlog path missed: both paths may publish it.
func (s *Sweep) due(grace time.Duration) (string, []any) {
	c := s.T.Columns
	created, arg, _ := CreatedBefore(s.T, grace)
	where := StatusIn(s.T, s.Pending) + " AND " + created
	args := []any{arg}
	nrt := c.NextRetryTime
	if nrt != "" {
		where += fmt.Sprintf(" AND (%[1]s IS NULL OR %[1]s <= NOW(3))", q(nrt))
		if rc := c.RetryCount; rc != "" {
			where += fmt.Sprintf(" AND (%s > 0 OR %[2]s IS NULL OR %[2]s < NOW(3) - INTERVAL ? MICROSECOND)", q(rc), q(nrt))
			args = append(args, grace.Microseconds())
		}
	}
	if u := c.UpdatedAt; u != "" {
		cond := fmt.Sprintf("%[1]s IS NULL OR %[1]s < NOW(3) - INTERVAL ? MICROSECOND", q(u))
		args = append(args, grace.Microseconds())
		if nrt != "" {
			cond += fmt.Sprintf(" OR %s > %s + INTERVAL ? MICROSECOND", q(nrt), q(u))
			args = append(args, requeueSlack.Microseconds())
		}
		where += " AND (" + cond + ")"
	}
	return where, args
}

// zombie selects rows left SENDING longer than timeout. ok is false when the
// table has no SENDING value, so cannot have zombies (or claims SENDING
// with nothing to date the claim by, which the sweeper's plan never does).
func (s *Sweep) zombie(timeout time.Duration) (where string, args []any, ok bool) {
	t := s.T
	if t.Statuses.Sending == "" {
		return "", nil, false
	}
	c := t.Columns
	sending := StatusIn(t, []string{t.Statuses.Sending})
	created, arg, _ := CreatedBefore(t, timeout)
	switch {
	case !s.ClaimSending:
		// The claim holds row locks and leaves rows pending (no column to
		// date a claim by): a SENDING row was inserted so by the
		// application, or left by an older version's claim, and is judged
		// by its age.
		return sending + " AND " + created, []any{arg}, true
	case c.UpdatedAt != "":
		return fmt.Sprintf("%s AND %s < NOW(3) - INTERVAL ? MICROSECOND", sending, q(c.UpdatedAt)), []any{timeout.Microseconds()}, true
	case c.NextRetryTime != "":
		// The claim set next_retry_time as a lease (LeaseOnClaim); a row the
		// application inserted SENDING has none and is judged by its age.
		return fmt.Sprintf("%s AND (%[2]s <= NOW(3) OR (%[2]s IS NULL AND %[3]s))", sending, q(c.NextRetryTime), created), []any{arg}, true
	}
	return "", nil, false
}

// LeaseOnClaim: the claim sets next_retry_time = now + zombie timeout, so
// the row is not due again until then (no SENDING value, or SENDING with
// no updated_at to date it).
func (s *Sweep) LeaseOnClaim() bool {
	c := s.T.Columns
	return c.NextRetryTime != "" && (!s.ClaimSending || c.UpdatedAt == "")
}

// LookSQL asks the replica, in one round trip, whether any row is due and
// whether any is a zombie.
func (s *Sweep) LookSQL(grace, zombieTimeout time.Duration) (string, []any) {
	due, args := s.due(grace)
	zombie := "0"
	if zw, zargs, ok := s.zombie(zombieTimeout); ok {
		zombie = fmt.Sprintf("EXISTS(SELECT 1 FROM %s WHERE %s)", QuotedName(s.T), zw)
		args = append(args, zargs...)
	}
	return fmt.Sprintf("SELECT EXISTS(SELECT 1 FROM %s WHERE %s), %s", QuotedName(s.T), due, zombie), args
}

// ClaimSQL reads up to n due rows and locks them, skipping rows another
// sweeper holds.
func (s *Sweep) ClaimSQL(grace time.Duration, n int) (string, []any) {
	due, args := s.due(grace)
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s LIMIT ? FOR UPDATE SKIP LOCKED",
		quoteAll(s.Cols), QuotedName(s.T), due), append(args, n)
}

// ClaimUpdateSQL marks n locked rows claimed (empty when the lock alone is
// the claim). The ids follow the returned arguments.
func (s *Sweep) ClaimUpdateSQL(n int, zombieTimeout time.Duration) (string, []any) {
	c := s.T.Columns
	var sets []string
	var args []any
	if s.ClaimSending {
		sets = append(sets, q(c.Status)+" = "+SQLValue(&s.T.Statuses, s.T.Statuses.Sending))
	}
	if s.LeaseOnClaim() {
		sets = append(sets, q(c.NextRetryTime)+" = NOW(3) + INTERVAL ? MICROSECOND")
		args = append(args, zombieTimeout.Microseconds())
	}
	if len(sets) == 0 {
		return "", nil
	}
	sets = append(sets, bookkeeping(s.T)...)
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s IN (%s)", QuotedName(s.T), strings.Join(sets, ", "),
		q(c.ID), ident.Placeholders(n)), args
}

// backToPending is the SET list that puts a row back to Pending[0], due at
// once: retry_count reset (resetRetries), next_retry_time = now, the error
// column as a placeholder (withError) and the bookkeeping.
func (s *Sweep) backToPending(resetRetries, withError bool) string {
	c := s.T.Columns
	sets := []string{q(c.Status) + " = " + SQLValue(&s.T.Statuses, s.Pending[0])}
	if resetRetries && c.RetryCount != "" {
		sets = append(sets, q(c.RetryCount)+" = 0")
	}
	if c.NextRetryTime != "" {
		sets = append(sets, q(c.NextRetryTime)+" = NOW(3)")
	}
	if withError && c.Error != "" {
		sets = append(sets, q(c.Error)+" = ?")
	}
	return strings.Join(append(sets, bookkeeping(s.T)...), ", ")
}

// ZombieResetSQL puts up to n zombies back to PENDING, due at once. When
// the table has an error column, args[0] is the note written into it.
func (s *Sweep) ZombieResetSQL(timeout time.Duration, n int) (string, []any, bool) {
	where, args, ok := s.zombie(timeout)
	if !ok {
		return "", nil, false
	}
	var setArgs []any
	if s.T.Columns.Error != "" {
		setArgs = append(setArgs, fmt.Sprintf("reset to pending: SENDING for more than %s (its sweeper stopped mid-publish)", timeout))
	}
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s LIMIT ?", QuotedName(s.T), s.backToPending(false, true), where),
		append(append(setArgs, args...), n), true
}

// archivable selects SENT rows older than the retention, by updated_at
// (when the row became SENT) or, without one, created_at.
func (s *Sweep) archivable(retention time.Duration) (string, []any) {
	sent := StatusIn(s.T, []string{s.T.Statuses.Sent})
	if u := s.T.Columns.UpdatedAt; u != "" {
		return fmt.Sprintf("%s AND %s < NOW(3) - INTERVAL ? MICROSECOND", sent, q(u)), []any{retention.Microseconds()}
	}
	created, arg, _ := CreatedBefore(s.T, retention)
	return sent + " AND " + created, []any{arg}
}

// ArchiveLookSQL asks the replica whether any SENT row is past the retention.
func (s *Sweep) ArchiveLookSQL(retention time.Duration) (string, []any) {
	where, args := s.archivable(retention)
	return fmt.Sprintf("SELECT EXISTS(SELECT 1 FROM %s WHERE %s)", QuotedName(s.T), where), args
}

// ArchiveDeleteSQL deletes up to n SENT rows past the retention.
func (s *Sweep) ArchiveDeleteSQL(retention time.Duration, n int) (string, []any) {
	where, args := s.archivable(retention)
	return fmt.Sprintf("DELETE FROM %s WHERE %s LIMIT ?", QuotedName(s.T), where), append(args, n)
}

// ArchiveSelectSQL locks the ids of up to n SENT rows past the retention.
func (s *Sweep) ArchiveSelectSQL(retention time.Duration, n int) (string, []any) {
	where, args := s.archivable(retention)
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s LIMIT ? FOR UPDATE SKIP LOCKED", q(s.T.Columns.ID), QuotedName(s.T), where),
		append(args, n)
}

// ArchiveCopySQL copies n rows, by id, into the archive table.
func (s *Sweep) ArchiveCopySQL(n int) string {
	list := quoteAll(s.ArchiveCols)
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s IN (%s)", s.ArchiveTable, list, list,
		QuotedName(s.T), q(s.T.Columns.ID), ident.Placeholders(n))
}

// DeleteIDsSQL deletes n rows by id (the archived ones).
func (s *Sweep) DeleteIDsSQL(n int) string {
	return fmt.Sprintf("DELETE FROM %s WHERE %s IN (%s)", QuotedName(s.T), q(s.T.Columns.ID), ident.Placeholders(n))
}

// RequeueMatch picks the FAILED rows a requeue puts back.
type RequeueMatch struct {
	// Since keeps those that failed within it (by updated_at, else
	// created_at); zero: any age.
	Since time.Duration
	// IDs, when given, keeps only those.
	IDs []string
	// Error, when set, keeps only the rows whose error column holds exactly
	// *Error (a failure group of the console); "" matches NULL and empty.
	Error *string
}

// requeueWhere is the condition selecting m's FAILED rows, with its
// arguments.
func (s *Sweep) requeueWhere(m RequeueMatch) (string, []any, error) {
	t := s.T
	if t.Statuses.Failed == "" {
		return "", nil, fmt.Errorf("%s has no failed status (statuses.failed): nothing to requeue", t.FullName())
	}
	where := StatusIn(t, []string{t.Statuses.Failed})
	var args []any
	if m.Since > 0 {
		recent, arg := updatedWithin(t, m.Since)
		where += " AND " + recent
		args = append(args, arg)
	}
	if len(m.IDs) > 0 {
		where += fmt.Sprintf(" AND %s IN (%s)", q(t.Columns.ID), ident.Placeholders(len(m.IDs)))
		for _, id := range m.IDs {
			args = append(args, id)
		}
	}
	if m.Error != nil {
		if t.Columns.Error == "" {
			return "", nil, fmt.Errorf("%s has no error column (columns.error): its failures cannot be told apart by reason", t.FullName())
		}
		if *m.Error == "" {
			where += fmt.Sprintf(" AND (%[1]s IS NULL OR %[1]s = '')", q(t.Columns.Error))
		} else {
			where += fmt.Sprintf(" AND %s = ?", q(t.Columns.Error))
			args = append(args, *m.Error)
		}
	}
	return where, args, nil
}

// RequeueNextSQL reads the ids of up to n of m's FAILED rows, in id order,
// those above after only unless it is nil. Requeue walks the rows so, by
// id and without locking them, because a row it put back can be FAILED
// again before it is done (the binlog path publishes a re-queue at once,
// and a permanent failure records it within seconds): a statement that
// took any n matching rows met those again, and with more than n rows
// failing again that fast it never came back short.
func (s *Sweep) RequeueNextSQL(m RequeueMatch, after any, n int) (string, []any, error) {
	where, args, err := s.requeueWhere(m)
	if err != nil {
		return "", nil, err
	}
	id := q(s.T.Columns.ID)
	if after != nil {
		where += fmt.Sprintf(" AND %s > ?", id)
		args = append(args, after)
	}
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s LIMIT ?", id, QuotedName(s.T), where, id),
		append(args, n), nil
}

// RequeueIDsSQL puts n of m's FAILED rows, by id, back to PENDING, due at
// once, with their retry count reset; a row that no longer matches (moved
// meanwhile) is left alone. The ids follow the returned arguments.
func (s *Sweep) RequeueIDsSQL(m RequeueMatch, n int) (string, []any, error) {
	where, args, err := s.requeueWhere(m)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s AND %s IN (%s)", QuotedName(s.T), s.backToPending(true, false), where,
		q(s.T.Columns.ID), ident.Placeholders(n)), args, nil
}

// RequeueCountSQL counts m's FAILED rows: a requeue's dry run, asked of the
// replica.
func (s *Sweep) RequeueCountSQL(m RequeueMatch) (string, []any, error) {
	where, args, err := s.requeueWhere(m)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("SELECT COUNT(*) FROM %s WHERE %s", QuotedName(s.T), where), args, nil
}

// ResetSentSQL puts one SENT row back to PENDING. Arguments: the note (when
// the table has an error column), the id, the version (when it has one).
func (s *Sweep) ResetSentSQL() string {
	t, c := s.T, s.T.Columns
	where := q(c.ID) + " = ? AND " + StatusIn(t, []string{t.Statuses.Sent})
	if c.Version != "" {
		where += " AND " + q(c.Version) + " = ?"
	}
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s", QuotedName(t), s.backToPending(true, true), where)
}
