package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/internal/serverclock"
	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
	"github.com/binlog-relay/binlog-relay/internal/sweeper"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
	"github.com/binlog-relay/binlog-relay/pkg/router"
)

// class is an outbox row's status as reconcile sees it.
type class uint8

const (
	classOther   class = iota
	classSent          // SENT, or any row of a table without a status column
	classPending       // pending, publishable or sending
	classFailed
)

// outRow is one outbox row of a chunk.
type outRow struct {
	id         any // the primary key, as the keyset and a repair pass it back
	msgID      string
	class      class
	recent     bool // sent within the grace period
	stale      bool // created longer than pending_after ago
	version    int64
	exchange   string
	routingKey string
	routed     bool
	recorded   int // consumers holding a record of the message
	missing    int // consumers that should have it and hold nothing past the grace period
}

// scan reads one outbox table in chunks of its primary key and compares
// each chunk with the inboxes of the consumers that get the table.
type scan struct {
	r       *Reconciler
	t       *outbox.Table
	tr      *TableReport
	cons    []*consumer
	rowCols []string // what the router needs: id, message id, route columns
	route   bool     // some consumer filters by route: rows are routed
	bounds  []any    // ReconcileChunkSQL's first arguments: recent, stale, since, until
	repair  bool
}

// repairNote goes into a reset row's error column.
const repairNote = "reset to pending by reconcile: sent, but no consumer recorded it"

func (r *Reconciler) scanTable(ctx context.Context, t *outbox.Table, clk serverclock.Clock, o Options, tr *TableReport) error {
	if t.Columns.CreatedAt == "" {
		tr.Skipped = "no columns.created_at, which the window and the grace period are measured on (map it to the row's insert time)"
		return nil
	}
	s := r.newScan(t, clk, o, tr)
	kr := newKeyRanges(r.replica, outboxsql.QuotedName(t), ident.Quote(t.Columns.ID), r.cfg.ChunkSize)
	for {
		ok, err := kr.next(ctx)
		if err != nil {
			return fmt.Errorf("reading outbox table %s: %w", t.FullName(), err)
		}
		if !ok {
			return nil
		}
		rows, err := s.read(ctx, kr)
		if err != nil {
			return fmt.Errorf("reading outbox table %s: %w", t.FullName(), err)
		}
		if len(rows) == r.cfg.ChunkSize {
			kr.more(rows[len(rows)-1].id)
		}
		if err := s.chunk(ctx, rows); err != nil {
			return err
		}
	}
}

// newScan prepares the reading of t: the columns the router needs (the
// route's only when a consumer filters by it), the repair's fate, and the
// time bounds in the server's clock.
func (r *Reconciler) newScan(t *outbox.Table, clk serverclock.Clock, o Options, tr *TableReport) *scan {
	s := &scan{r: r, t: t, tr: tr, cons: r.consumersOf(t), repair: o.Repair}
	s.rowCols = []string{t.Columns.ID}
	if m := t.Columns.MessageID; m != "" && m != t.Columns.ID {
		s.rowCols = append(s.rowCols, m)
	}
	for _, c := range s.cons {
		tr.pair(c.name)
		s.route = s.route || !c.filter.any()
	}
	if s.route {
		for _, col := range router.RouteColumns(t) {
			if !slices.Contains(s.rowCols, col) {
				s.rowCols = append(s.rowCols, col)
			}
		}
	}
	if len(s.cons) > 0 {
		tr.Repair = &RepairReport{}
		if err := sweeper.Sweepable(t); err != nil {
			tr.Repair.Note = "the sweeper cannot send this table again: " + err.Error()
			s.repair = false
		}
	}
	recent := clk.At.Add(-r.cfg.GracePeriod)
	s.bounds = []any{clk.Value(recent, t.CreatedAtEpoch)}
	if t.Columns.UpdatedAt != "" {
		s.bounds = []any{clk.Value(recent, ""), clk.Value(recent, t.CreatedAtEpoch)}
	}
	s.bounds = append(s.bounds, clk.Value(clk.At.Add(-r.cfg.PendingAfter), t.CreatedAtEpoch),
		clk.Value(o.Since, t.CreatedAtEpoch), clk.Value(o.Until, t.CreatedAtEpoch))
	return s
}

func (tr *TableReport) pair(consumer string) *PairReport {
	p, ok := tr.pairs[consumer]
	if !ok {
		p = &PairReport{Consumer: consumer}
		tr.pairs[consumer] = p
		tr.Consumers = append(tr.Consumers, p)
	}
	return p
}

// read reads the rows of the current key range (at most a chunk) created
// in the window: the router's columns, then status, version, "sent within
// the grace period" and "created before pending_after".
func (s *scan) read(ctx context.Context, kr *keyRanges) ([]outRow, error) {
	cond, rangeArgs := kr.cond()
	args := append(append(append([]any(nil), s.bounds...), rangeArgs...), s.r.cfg.ChunkSize)
	rows := make([]outRow, 0, s.r.cfg.ChunkSize)
	err := eachOutboxRow(ctx, s.r.replica, s.t, outboxsql.ReconcileChunkSQL(s.t, s.rowCols, cond), args, s.rowCols, 4,
		func(row *outbox.Row, rest []any, intID bool) error {
			rows = append(rows, s.outRow(row, rest, intID))
			return nil
		})
	return rows, err
}

// eachOutboxRow runs q, which reads cols of t and then extra more columns,
// and calls f with each row built from cols, the values of the extra
// columns, and whether the id (the first column) is an integer.
func eachOutboxRow(ctx context.Context, db *sql.DB, t *outbox.Table, q string, args []any, cols []string, extra int,
	f func(row *outbox.Row, rest []any, intID bool) error) error {
	n := len(cols)
	vals := make([]any, n+extra)
	ptrs := make([]any, len(vals))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var datetime []bool
	return sqlrows.Each(ctx, db, q, args, func(rs *sql.Rows, types []*sql.ColumnType) error {
		if err := rs.Scan(ptrs...); err != nil {
			return err
		}
		if datetime == nil {
			datetime = make([]bool, n)
			for i := range datetime {
				datetime[i] = types[i].DatabaseTypeName() == "DATETIME"
			}
		}
		return f(outboxsql.RowFromSQL(t, cols, vals[:n], datetime), vals[n:], sqlrows.IntType(types[0]))
	})
}

// outRow is row with the values read after its columns: status, version,
// "recent" and "stale".
func (s *scan) outRow(row *outbox.Row, rest []any, intID bool) outRow {
	o := outRow{id: row.ID, msgID: router.MessageID(row), class: s.classify(rest[0]),
		recent: truth(rest[2]), stale: truth(rest[3])}
	o.version, _ = strconv.ParseInt(colval.ValueString(rest[1]), 10, 64)
	o.id = keyValue(colval.ValueString(row.ID), intID)
	if s.route {
		var err error
		o.exchange, o.routingKey, err = s.r.router.Destination(row)
		o.routed = err == nil
	}
	return o
}

func truth(v any) bool { return colval.ValueString(v) == "1" }

func (s *scan) classify(status any) class {
	st := s.t.Statuses
	if s.t.Columns.Status == "" {
		return classSent // every insert is published; nothing is written back
	}
	switch v := colval.ValueString(status); {
	case status == nil:
		return classOther
	case v == st.Sent:
		return classSent
	case v == st.Failed && st.Failed != "":
		return classFailed
	case v == st.Pending && v != "", v == st.Sending && v != "", slices.Contains(st.Publishable, v):
		return classPending
	}
	return classOther
}

// chunk counts the outbox side, compares with each consumer, then repairs.
func (s *scan) chunk(ctx context.Context, rows []outRow) error {
	max := s.r.cfg.MaxIDs
	for i := range rows {
		row := &rows[i]
		s.tr.Rows++
		switch row.class {
		case classSent:
			s.tr.Sent++
		case classFailed:
			s.tr.Failed.add(row.msgID, max)
		case classPending:
			if row.stale {
				s.tr.PendingStale.add(row.msgID, max)
			}
		}
	}
	for _, c := range s.cons {
		if err := s.compare(ctx, c, rows); err != nil {
			return err
		}
	}
	if s.tr.Repair == nil {
		return nil
	}
	return s.repairChunk(ctx, rows)
}
