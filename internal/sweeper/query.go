package sweeper

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outbox"
)

// mode is how a claimed row is kept from other sweepers while it is
// published. It follows from the columns and statuses the table has.
type mode int

const (
	// modeSending: the claim moves the row to SENDING (version+1) in a short
	// transaction; it is published after the commit and a zombie reset takes
	// it back if its sweeper dies.
	modeSending mode = iota
	// modeLease: no SENDING value (local_message), but a next_retry_time: the
	// claim pushes next_retry_time out by the zombie timeout, so the row is
	// not due again until then. A dead sweeper's rows come back on their own.
	modeLease
	// modeLocked: neither (t_message_record, Eventuate's message): the claim
	// transaction keeps its row locks while the batch is published and
	// settled, which is the only thing keeping another sweeper off the rows.
	modeLocked
)

func (m mode) String() string {
	return [...]string{"sending", "lease", "locked"}[m]
}

// plan is everything the sweeper says to the database about one table.
type plan struct {
	t       *outbox.Table
	mode    mode
	pending []string // statuses a due row is in
	claimed []string // statuses a claimed row is in
	cols    []string // columns read to publish a row

	// Filled by prepare for archive.mode move.
	archiveTable string   // quoted `schema`.`name`
	archiveCols  []string // the outbox table's columns, in order

	lastArchive time.Time
}

// errNotSweepable says why a table is left to the binlog path alone.
var errNotSweepable = errors.New("not swept")

func newPlan(t *outbox.Table) (*plan, error) {
	c, st := t.Columns, t.Statuses
	if c.Status == "" {
		return nil, fmt.Errorf("%w: %s has no status column, so every insert is published by the binlog path and nothing records a row as sent", errNotSweepable, t.FullName())
	}
	if c.CreatedAt == "" {
		return nil, fmt.Errorf("%w: %s has no columns.created_at, which the grace period needs (map it to the row's insert time)", errNotSweepable, t.FullName())
	}
	p := &plan{t: t}
	if st.Pending != "" {
		p.pending = []string{st.Pending}
	} else {
		for _, v := range st.Publishable {
			if v != st.Sending {
				p.pending = append(p.pending, v)
			}
		}
	}
	if len(p.pending) == 0 {
		return nil, fmt.Errorf("%w: %s has no pending status value (statuses.pending)", errNotSweepable, t.FullName())
	}
	switch {
	case st.Sending != "":
		p.mode, p.claimed = modeSending, []string{st.Sending}
	case c.NextRetryTime != "":
		p.mode, p.claimed = modeLease, p.pending
	default:
		p.mode, p.claimed = modeLocked, p.pending
	}
	// Read what routing and bookkeeping need; not the timestamps or the
	// last error (up to 1 KiB a row).
	skip := map[string]bool{"columns.status": true, "columns.created_at": true, "columns.updated_at": true,
		"columns.next_retry_time": true, "columns.error": true}
	for field, col := range t.MappedColumns() {
		if !skip[field] && !slices.Contains(p.cols, col) {
			p.cols = append(p.cols, col)
		}
	}
	slices.Sort(p.cols)
	return p, nil
}

func q(col string) string { return outbox.QuoteIdent(col) }

func (p *plan) status() string { return q(p.t.Columns.Status) }

func (p *plan) statusIn(vs []string) string {
	if len(vs) == 1 {
		return p.status() + " = " + p.t.Statuses.SQLValue(vs[0])
	}
	return p.status() + " IN (" + p.t.Statuses.SQLList(vs) + ")"
}

func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?,", n), ",")
}

// due selects rows the sweeper may take: pending, older than the grace
// period, and with next_retry_time (when the table has one) unset or past.
func (p *plan) due(grace time.Duration) (string, []any) {
	created, arg, _ := p.t.CreatedBefore(grace)
	where := p.statusIn(p.pending) + " AND " + created
	if nrt := p.t.Columns.NextRetryTime; nrt != "" {
		where += fmt.Sprintf(" AND (%[1]s IS NULL OR %[1]s <= NOW(3))", q(nrt))
	}
	return where, []any{arg}
}

// zombie selects rows left SENDING longer than timeout. ok is false when the
// table cannot have zombies (no SENDING value) or gives no way to tell their
// age.
func (p *plan) zombie(timeout time.Duration) (where string, args []any, ok bool) {
	if p.mode != modeSending {
		return "", nil, false
	}
	c := p.t.Columns
	sending := p.statusIn(p.claimed)
	switch {
	case c.UpdatedAt != "":
		return fmt.Sprintf("%s AND %s < NOW(3) - INTERVAL ? MICROSECOND", sending, q(c.UpdatedAt)), []any{timeout.Microseconds()}, true
	case c.NextRetryTime != "":
		// The claim set next_retry_time as a lease (leaseOnClaim); a row the
		// application inserted SENDING has none and is judged by its age.
		created, arg, _ := p.t.CreatedBefore(timeout)
		return fmt.Sprintf("%s AND (%[2]s <= NOW(3) OR (%[2]s IS NULL AND %[3]s))", sending, q(c.NextRetryTime), created), []any{arg}, true
	}
	return "", nil, false
}

// leaseOnClaim: the claim sets next_retry_time = now + zombie timeout.
func (p *plan) leaseOnClaim() bool {
	c := p.t.Columns
	return p.mode == modeLease || (p.mode == modeSending && c.UpdatedAt == "" && c.NextRetryTime != "")
}

// lookSQL asks the replica, in one round trip, whether any row is due and
// whether any is a zombie.
func (p *plan) lookSQL(grace, zombieTimeout time.Duration) (string, []any) {
	due, args := p.due(grace)
	zombie := "0"
	if zw, zargs, ok := p.zombie(zombieTimeout); ok {
		zombie = fmt.Sprintf("EXISTS(SELECT 1 FROM %s WHERE %s)", p.t.QuotedName(), zw)
		args = append(args, zargs...)
	}
	return fmt.Sprintf("SELECT EXISTS(SELECT 1 FROM %s WHERE %s), %s", p.t.QuotedName(), due, zombie), args
}

// claimSQL reads up to n due rows and locks them, skipping rows another
// sweeper holds. It runs in a READ COMMITTED transaction: no gap locks, so
// the application's INSERTs never wait on it.
func (p *plan) claimSQL(grace time.Duration, n int) (string, []any) {
	due, args := p.due(grace)
	cols := make([]string, len(p.cols))
	for i, c := range p.cols {
		cols[i] = q(c)
	}
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s LIMIT ? FOR UPDATE SKIP LOCKED",
		strings.Join(cols, ", "), p.t.QuotedName(), due), append(args, n)
}

// claimUpdateSQL marks the locked rows claimed (empty in locked mode, where
// the lock is the claim).
func (p *plan) claimUpdateSQL(n int, zombieTimeout time.Duration) (string, []any) {
	c := p.t.Columns
	var sets []string
	var args []any
	if p.mode == modeSending {
		sets = append(sets, p.status()+" = "+p.t.Statuses.SQLValue(p.t.Statuses.Sending))
	}
	if p.leaseOnClaim() {
		sets = append(sets, q(c.NextRetryTime)+" = NOW(3) + INTERVAL ? MICROSECOND")
		args = append(args, zombieTimeout.Microseconds())
	}
	if len(sets) == 0 {
		return "", nil
	}
	sets = append(sets, p.bookkeeping()...)
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s IN (%s)", p.t.QuotedName(), strings.Join(sets, ", "),
		q(c.ID), placeholders(n)), args
}

// bookkeeping is version+1 and updated_at = now, for the columns the table has.
func (p *plan) bookkeeping() []string {
	var sets []string
	if v := p.t.Columns.Version; v != "" {
		sets = append(sets, fmt.Sprintf("%[1]s = %[1]s + 1", q(v)))
	}
	if u := p.t.Columns.UpdatedAt; u != "" {
		sets = append(sets, q(u)+" = NOW(3)")
	}
	return sets
}

// zombieResetSQL puts up to n zombies back to PENDING, due at once. When
// the table has an error column, args[0] is the note written into it.
func (p *plan) zombieResetSQL(timeout time.Duration, n int) (string, []any, bool) {
	where, args, ok := p.zombie(timeout)
	if !ok {
		return "", nil, false
	}
	c := p.t.Columns
	sets := []string{p.status() + " = " + p.t.Statuses.SQLValue(p.pending[0])}
	var setArgs []any
	if c.NextRetryTime != "" {
		sets = append(sets, q(c.NextRetryTime)+" = NOW(3)")
	}
	if c.Error != "" {
		sets = append(sets, q(c.Error)+" = ?")
		setArgs = append(setArgs, fmt.Sprintf("reset to pending: SENDING for more than %s (its sweeper stopped mid-publish)", timeout))
	}
	sets = append(sets, p.bookkeeping()...)
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s LIMIT ?", p.t.QuotedName(), strings.Join(sets, ", "), where),
		append(append(setArgs, args...), n), true
}

// archivable selects SENT rows older than the retention, by updated_at
// (when the row became SENT) or, without one, created_at.
func (p *plan) archivable(retention time.Duration) (string, []any) {
	sent := p.status() + " = " + p.t.Statuses.SQLValue(p.t.Statuses.Sent)
	if u := p.t.Columns.UpdatedAt; u != "" {
		return fmt.Sprintf("%s AND %s < NOW(3) - INTERVAL ? MICROSECOND", sent, q(u)), []any{retention.Microseconds()}
	}
	created, arg, _ := p.t.CreatedBefore(retention)
	return sent + " AND " + created, []any{arg}
}

func (p *plan) archiveLookSQL(retention time.Duration) (string, []any) {
	where, args := p.archivable(retention)
	return fmt.Sprintf("SELECT EXISTS(SELECT 1 FROM %s WHERE %s)", p.t.QuotedName(), where), args
}

func (p *plan) archiveDeleteSQL(retention time.Duration, n int) (string, []any) {
	where, args := p.archivable(retention)
	return fmt.Sprintf("DELETE FROM %s WHERE %s LIMIT ?", p.t.QuotedName(), where), append(args, n)
}

func (p *plan) archiveSelectSQL(retention time.Duration, n int) (string, []any) {
	where, args := p.archivable(retention)
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s LIMIT ? FOR UPDATE SKIP LOCKED", q(p.t.Columns.ID), p.t.QuotedName(), where),
		append(args, n)
}

func (p *plan) archiveCopySQL(n int) string {
	cols := make([]string, len(p.archiveCols))
	for i, c := range p.archiveCols {
		cols[i] = q(c)
	}
	list := strings.Join(cols, ", ")
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE %s IN (%s)", p.archiveTable, list, list,
		p.t.QuotedName(), q(p.t.Columns.ID), placeholders(n))
}

func (p *plan) deleteIDsSQL(n int) string {
	return fmt.Sprintf("DELETE FROM %s WHERE %s IN (%s)", p.t.QuotedName(), q(p.t.Columns.ID), placeholders(n))
}

// RequeueFilter picks the FAILED rows an operator puts back.
type RequeueFilter struct {
	// Since keeps rows that failed within this long (by updated_at, else
	// created_at); zero means any age.
	Since time.Duration
	// IDs keeps only these primary keys; empty means all.
	IDs []string
}

// requeueSQL puts up to n FAILED rows back to PENDING, due at once, with
// their retry count reset.
func (p *plan) requeueSQL(f RequeueFilter, n int) (string, []any, error) {
	t := p.t
	c := t.Columns
	if t.Statuses.Failed == "" {
		return "", nil, fmt.Errorf("%s has no failed status (statuses.failed): nothing to requeue", t.FullName())
	}
	sets := []string{p.status() + " = " + t.Statuses.SQLValue(p.pending[0])}
	if c.RetryCount != "" {
		sets = append(sets, q(c.RetryCount)+" = 0")
	}
	if c.NextRetryTime != "" {
		sets = append(sets, q(c.NextRetryTime)+" = NOW(3)")
	}
	sets = append(sets, p.bookkeeping()...)
	where := p.status() + " = " + t.Statuses.SQLValue(t.Statuses.Failed)
	var args []any
	if f.Since > 0 {
		if c.UpdatedAt != "" {
			where += fmt.Sprintf(" AND %s >= NOW(3) - INTERVAL ? MICROSECOND", q(c.UpdatedAt))
			args = append(args, f.Since.Microseconds())
		} else {
			created, arg, _ := t.CreatedBefore(f.Since)
			where += " AND NOT (" + created + ")"
			args = append(args, arg)
		}
	}
	if len(f.IDs) > 0 {
		where += fmt.Sprintf(" AND %s IN (%s)", q(c.ID), placeholders(len(f.IDs)))
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	return fmt.Sprintf("UPDATE %s SET %s WHERE %s LIMIT ?", t.QuotedName(), strings.Join(sets, ", "), where),
		append(args, n), nil
}
