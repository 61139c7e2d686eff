package reconcile

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/binlog-relay/binlog-relay/internal/config"
	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/internal/sqlrows"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// consumer is one consumer's inbox, read through its table layout.
type consumer struct {
	name     string
	value    string // the consumer column's value
	db       *sql.DB
	layout   inbox.Preset
	schema   string
	table    string // `schema`.`table`
	logTable string // `schema`.`log_table`, or ""
	tables   []*outbox.Table
	filter   filter
}

func newConsumer(cc config.ReconcileConsumer, db *sql.DB, all []*outbox.Table) (*consumer, error) {
	layout, err := cc.InboxLayout()
	if err != nil {
		return nil, err
	}
	c := &consumer{name: cc.Name, value: cc.Consumer, db: db, layout: layout, schema: cc.Schema,
		table:  ident.Quote(cc.Schema) + "." + ident.Quote(layout.Table),
		filter: newFilter(cc.Exchanges, cc.RoutingKeys), tables: all}
	if layout.LogTable != "" {
		c.logTable = ident.Quote(cc.Schema) + "." + ident.Quote(layout.LogTable)
	}
	if len(cc.Tables) > 0 {
		c.tables = nil
		for _, name := range cc.Tables {
			t, err := config.FindTable(all, name)
			if err != nil {
				return nil, err
			}
			c.tables = append(c.tables, t)
		}
	}
	return c, nil
}

// wants reports whether the consumer should get row's message.
func (c *consumer) wants(row *outRow) bool {
	return c.filter.any() || (row.routed && c.filter.match(row.exchange, row.routingKey))
}

// state is what one inbox row says of its message.
type state uint8

const (
	processed state = iota + 1
	failed
	retrying
)

// record is one inbox row (or processing-log row) for a message id.
type record struct {
	msgID string
	log   bool // from the processing log (msg-dedup's t_message_log)
	state state
}

// stateTable reports whether the inbox records each message's state
// (consumer_message) rather than only the handled ids (t_msg_dedup).
func (c *consumer) stateTable() bool { return c.layout.Kind == inbox.KindState }

// consumerCond is the condition on the consumer column, when the table has one.
func (c *consumer) consumerCond() (string, []any) {
	if col := c.layout.Columns.Consumer; col != "" {
		return ident.Quote(col) + " = ?", []any{c.value}
	}
	return "", nil
}

// lookup reads the inbox rows (and processing-log rows) of ids, through
// the unique index on the message id, sorted by message id (bytes).
func (c *consumer) lookup(ctx context.Context, ids []string) ([]record, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	cols := c.layout.Columns
	var sel string
	if c.stateTable() {
		sel = ident.Quote(cols.MessageID) + ", " + ident.Quote(cols.Status)
	} else {
		sel = ident.Quote(cols.MessageID) + ", ''"
	}
	where, args := c.consumerCond()
	if where != "" {
		where += " AND "
	}
	where += ident.Quote(cols.MessageID) + " IN (" + placeholders(len(ids)) + ")"
	for _, id := range ids {
		args = append(args, id)
	}
	recs, err := c.read(ctx, "SELECT "+sel+" FROM "+c.table+" WHERE "+where, args, false)
	if err != nil {
		return nil, fmt.Errorf("reading inbox %s of consumer %s: %w", c.table, c.name, err)
	}
	if c.logTable != "" {
		lc := c.layout.LogColumns
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		id := ident.Quote(lc.MessageID)
		q := "SELECT " + id + ", " + ident.Quote(lc.Status) + " FROM " + c.logTable + " WHERE " + id + " IN (" + placeholders(len(ids)) + ")"
		logRecs, err := c.read(ctx, q, args, true)
		if err != nil {
			return nil, fmt.Errorf("reading processing log %s of consumer %s: %w", c.logTable, c.name, err)
		}
		recs = append(recs, logRecs...)
	}
	slices.SortFunc(recs, func(a, b record) int { return strings.Compare(a.msgID, b.msgID) })
	return recs, nil
}

func (c *consumer) read(ctx context.Context, q string, args []any, log bool) ([]record, error) {
	var out []record
	var id, status sql.RawBytes
	err := sqlrows.Each(ctx, c.db, q, args, func(rs *sql.Rows, _ []*sql.ColumnType) error {
		if err := rs.Scan(&id, &status); err != nil {
			return err
		}
		out = append(out, record{msgID: string(id), log: log, state: c.stateOf(string(status), log)})
		return nil
	})
	return out, err
}

// stateOf maps a status column's value. A dedup table's row means handled.
func (c *consumer) stateOf(status string, log bool) state {
	switch {
	case log && status == inbox.LogFailed, !log && status == inbox.StatusFailed:
		return failed
	case log && status == inbox.LogSuccess, !log && (status == inbox.StatusSuccess || !c.stateTable()):
		return processed
	default:
		return retrying // PENDING_RETRY, RETRYING, PROCESSING
	}
}

// verdict is what the inbox says of one message id.
type verdict struct {
	rows, logRows           int
	processed, failed, busy bool
}

func (v *verdict) add(r record) {
	if r.log {
		v.logRows++
	} else {
		v.rows++
	}
	switch r.state {
	case processed:
		// A SUCCESS processing-log row is not what proves the work: the
		// dedup row is, as it commits with the work.
		if !r.log {
			v.processed = true
		}
	case failed:
		v.failed = true
	default:
		v.busy = true
	}
}

func (v verdict) recorded() bool  { return v.rows+v.logRows > 0 }
func (v verdict) duplicate() bool { return v.rows > 1 || v.logRows > 1 }

// Check reads no row (LIMIT 0) of each consumer's inbox table, and of its
// processing log, with every column a run reads, so that a missing table,
// column or grant shows before the first run. Each error names the
// consumer and its server.
func (r *Reconciler) Check(ctx context.Context) []error {
	var errs []error
	for i, c := range r.consumers {
		cols := c.layout.Columns
		sel := []string{cols.MessageID, cols.ID, cols.Consumer, cols.Status, cols.FirstConsumeTime, cols.CreatedAt}
		if !c.stateTable() {
			sel = []string{cols.MessageID, cols.CreatedAt}
		}
		where := fmt.Sprintf("reconcile.consumers[%d] %s (%s)", i, c.name, r.cfg.Consumers[i].Redacted())
		if err := selectNothing(ctx, c.db, c.table, sel); err != nil {
			errs = append(errs, fmt.Errorf("%s: inbox table %s: %w", where, c.table, err))
		}
		if c.logTable != "" {
			lc := c.layout.LogColumns
			if err := selectNothing(ctx, c.db, c.logTable, []string{lc.MessageID, lc.Status}); err != nil {
				errs = append(errs, fmt.Errorf("%s: processing log %s: %w", where, c.logTable, err))
			}
		}
	}
	return errs
}

func selectNothing(ctx context.Context, db *sql.DB, table string, cols []string) error {
	var quoted []string
	for _, c := range cols {
		if c != "" {
			quoted = append(quoted, ident.Quote(c))
		}
	}
	rows, err := db.QueryContext(ctx, "SELECT "+strings.Join(quoted, ", ")+" FROM "+table+" LIMIT 0")
	if err != nil {
		return err
	}
	return rows.Close()
}
