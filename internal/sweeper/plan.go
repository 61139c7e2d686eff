package sweeper

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// mode is how a claimed row is kept from other sweepers while it is
// published. It follows from the columns and statuses the table has.
type mode int

const (
	// modeSending: the claim moves the row to SENDING (version+1) in a short
	// transaction; it is published after the commit and a zombie reset takes
	// it back if its sweeper dies. It needs a column that dates the claim
	// (updated_at, or next_retry_time as a lease): without one a zombie
	// cannot be told from a row in flight.
	modeSending mode = iota
	// modeLease: no SENDING value (local_message), but a next_retry_time: the
	// claim pushes next_retry_time out by the zombie timeout, so the row is
	// not due again until then. A dead sweeper's rows come back on their own.
	modeLease
	// modeLocked: neither (t_message_record, Eventuate's message), or a
	// SENDING value with nothing to date a claim by: the claim transaction
	// keeps its row locks while the batch is published and settled, which is
	// the only thing keeping another sweeper off the rows. The rows stay
	// pending; a dead sweeper's locks go with its connection.
	modeLocked
)

func (m mode) String() string {
	return [...]string{"sending", "lease", "locked"}[m]
}

// plan is how the sweeper treats one table: its claim mode, and the
// statements that follow from it (internal/outboxsql builds them).
type plan struct {
	outboxsql.Sweep
	mode mode

	lastArchive time.Time
}

// Sweepable says why the sweeper cannot send a table's rows (no status
// column, no created_at, no pending value), or nil when it can.
func Sweepable(t *outbox.Table) error {
	_, err := newPlan(t)
	return err
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
	p := &plan{Sweep: outboxsql.Sweep{T: t}}
	if st.Pending != "" {
		p.Pending = []string{st.Pending}
	} else {
		for _, v := range st.Publishable {
			if v != st.Sending {
				p.Pending = append(p.Pending, v)
			}
		}
	}
	if len(p.Pending) == 0 {
		return nil, fmt.Errorf("%w: %s has no pending status value (statuses.pending)", errNotSweepable, t.FullName())
	}
	switch {
	case st.Sending != "" && (c.UpdatedAt != "" || c.NextRetryTime != ""):
		p.mode, p.Claimed = modeSending, []string{st.Sending}
	case c.NextRetryTime != "":
		p.mode, p.Claimed = modeLease, p.Pending
	default:
		// A SENDING value without updated_at or next_retry_time lands here
		// too: a row claimed SENDING by a sweeper SIGKILLed before its SENT
		// write would look in flight forever (no zombie reset can date it,
		// no lease runs out). Rows already SENDING (inserted so, or left by
		// an older version) are reset by their created_at (outboxsql's
		// zombie).
		p.mode, p.Claimed = modeLocked, p.Pending
	}
	p.ClaimSending = p.mode == modeSending
	// Read what routing and bookkeeping need; not the timestamps or the
	// last error (up to 1 KiB a row).
	skip := map[string]bool{"columns.status": true, "columns.created_at": true, "columns.updated_at": true,
		"columns.next_retry_time": true, "columns.error": true}
	for field, col := range t.MappedColumns() {
		if !skip[field] && !slices.Contains(p.Cols, col) {
			p.Cols = append(p.Cols, col)
		}
	}
	slices.Sort(p.Cols)
	return p, nil
}
