package console

// The failures page's data: per table, the failed and retrying rows grouped
// by state and error text (outboxsql.FailureGroupsSQL), and a group's rows
// one page at a time (outboxsql.FailureRowsSQL), read from the source
// replica through the query cache.

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/outboxsql"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Group is one failure group: the rows of one table in one state with one
// error text.
type Group struct {
	Table     string // schema.name
	State     string // outboxsql.StateFailed or StateRetrying
	Error     string // the error text ("" none), its first outboxsql.ErrorTextLen characters
	Key       string // names the group in URLs
	Rows      int64
	FirstSeen time.Time // the rows' last change: earliest and latest
	LastSeen  time.Time
	NextRetry time.Time // the earliest next retry (retrying rows)
}

// TableFailures is one table's groups.
type TableFailures struct {
	Table    string
	Groups   []Group
	Scanned  int64 // rows the query read
	Capped   bool  // it read ScanRows rows: there may be more
	Note     string
	Err      string
	Age      time.Duration // how old the result is
	Failed   int64
	Retrying int64
}

// groupKey names a group in URLs: its state and a hash of its text (an
// error text can be long and hold anything).
func groupKey(state, errText string) string {
	h := sha256.Sum256([]byte(errText))
	return state + "-" + hex.EncodeToString(h[:8])
}

// table finds a configured table by schema.name.
func (s *Server) table(name string) *outbox.Table {
	for _, t := range s.deps.Tables() {
		if t.FullName() == name {
			return t
		}
	}
	return nil
}

// failures reads every table's groups (each through the cache).
func (s *Server) failures(ctx context.Context) []TableFailures {
	var out []TableFailures
	for _, t := range s.deps.Tables() {
		out = append(out, s.tableFailures(ctx, t))
	}
	return out
}

func (s *Server) tableFailures(ctx context.Context, t *outbox.Table) TableFailures {
	tf := TableFailures{Table: t.FullName()}
	query, args, ok := outboxsql.FailureGroupsSQL(t, s.cfg.ScanRows, s.cfg.MaxGroups)
	if !ok {
		tf.Note = "no status column: this table cannot record a failure (its refused messages go to broker.dead_letter_exchange, or the stream holds behind them)"
		return tf
	}
	if t.Columns.Error == "" {
		tf.Note = "no error column: the rows are grouped by state only"
	}
	v, age, err := s.queries.get(ctx, "groups", "groups:"+tf.Table, s.cfg.QueryTimeout, func(ctx context.Context) (any, error) {
		return s.readGroups(ctx, t, query, args)
	})
	tf.Age = age
	if err != nil {
		tf.Err = "reading the failure groups on the source replica failed: " + err.Error()
		return tf
	}
	groups := v.([]Group)
	tf.Groups = groups
	for _, g := range groups {
		tf.Scanned += g.Rows
		if g.State == outboxsql.StateFailed {
			tf.Failed += g.Rows
		} else {
			tf.Retrying += g.Rows
		}
	}
	tf.Capped = tf.Scanned >= int64(s.cfg.ScanRows)
	return tf
}

func (s *Server) readGroups(ctx context.Context, t *outbox.Table, query string, args []any) ([]Group, error) {
	db := s.deps.Replica()
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Group
	var firstIDs []any
	for rows.Next() {
		var g Group
		var hash sql.NullString
		var first, last, next sql.NullTime
		var id any
		if err := rows.Scan(&g.State, &hash, &g.Rows, &first, &last, &next, &id); err != nil {
			return nil, err
		}
		if b, ok := id.([]byte); ok {
			id = string(b) // the driver reuses the buffer
		}
		g.Table = t.FullName()
		g.FirstSeen, g.LastSeen, g.NextRetry = first.Time, last.Time, next.Time
		out = append(out, g)
		firstIDs = append(firstIDs, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows.Close()
	texts := map[string]string{}
	if t.Columns.Error != "" && len(firstIDs) > 0 {
		// One lookup by primary key per group: the text of its first row.
		trows, err := db.QueryContext(ctx, outboxsql.FailureTextsSQL(t, len(firstIDs)), firstIDs...)
		if err != nil {
			return nil, err
		}
		defer trows.Close()
		for trows.Next() {
			var id any
			var text sql.NullString
			if err := trows.Scan(&id, &text); err != nil {
				return nil, err
			}
			texts[colval.ValueStringIn(idValue(id), t.Location())] = text.String
		}
		if err := trows.Err(); err != nil {
			return nil, err
		}
	}
	for i := range out {
		out[i].Error = texts[colval.ValueStringIn(idValue(firstIDs[i]), t.Location())]
		out[i].Key = groupKey(out[i].State, out[i].Error)
	}
	return out, nil
}

// idValue is a scanned id as colval.ValueStringIn takes it.
func idValue(v any) any {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return v
}

// findGroup looks a group up by key among table's groups (cached).
func (s *Server) findGroup(ctx context.Context, t *outbox.Table, key string) (Group, bool, error) {
	tf := s.tableFailures(ctx, t)
	if tf.Err != "" {
		return Group{}, false, fmt.Errorf("%s", tf.Err)
	}
	for _, g := range tf.Groups {
		if g.Key == key {
			return g, true, nil
		}
	}
	return Group{}, false, nil
}

// Row is one row of a group as the page shows it.
type Row struct {
	ID, MessageID, Exchange, RoutingKey string
	RouteErr                            string
	Retries                             string
	Error                               string
	Seen, NextRetry                     time.Time
	Payload                             string
	PayloadCut                          bool
}

// maxPayloadShown caps a payload on the page.
const maxPayloadShown = 4096

// groupRows reads one page of g's rows after id after.
func (s *Server) groupRows(ctx context.Context, t *outbox.Table, g Group, after string) ([]Row, time.Duration, error) {
	cols := outboxsql.RowColumns(t, s.cfg.Payloads)
	errText := &g.Error
	if t.Columns.Error == "" {
		errText = nil
	}
	query, args := outboxsql.FailureRowsSQL(t, cols, g.State, errText, after, s.cfg.PageRows)
	kind := fmt.Sprintf("rows:%s:%s:%s", t.FullName(), g.Key, after)
	v, age, err := s.queries.get(ctx, "rows", kind, s.cfg.QueryTimeout, func(ctx context.Context) (any, error) {
		return s.readRows(ctx, t, cols, query, args)
	})
	if err != nil {
		return nil, 0, err
	}
	return v.([]Row), age, nil
}

func (s *Server) readRows(ctx context.Context, t *outbox.Table, cols []string, query string, args []any) ([]Row, error) {
	rows, err := s.deps.Replica().QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	types, err := rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	datetime := make([]bool, len(cols))
	for i := range cols {
		datetime[i] = types[i].DatabaseTypeName() == "DATETIME"
	}
	rt, rtErr := s.routerFor()
	var out []Row
	for rows.Next() {
		vals := make([]any, len(cols))
		dest := make([]any, len(cols)+3)
		for i := range vals {
			dest[i] = &vals[i]
		}
		var errText sql.NullString
		var seen, next sql.NullTime
		dest[len(cols)], dest[len(cols)+1], dest[len(cols)+2] = &errText, &seen, &next
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		row := outboxsql.RowFromSQL(t, cols, vals, datetime)
		r := Row{ID: colval.ValueStringIn(row.ID, t.Location()), Error: errText.String, Seen: seen.Time, NextRetry: next.Time}
		if c := t.Columns.RetryCount; c != "" {
			r.Retries = colval.ValueStringIn(row.Values[c], t.Location())
		}
		if c := t.Columns.Payload; s.cfg.Payloads && c != "" {
			r.Payload = colval.ValueStringIn(row.Values[c], t.Location())
			if len(r.Payload) > maxPayloadShown {
				cut := maxPayloadShown
				for cut > 0 && !utf8.RuneStart(r.Payload[cut]) {
					cut--
				}
				r.Payload, r.PayloadCut = r.Payload[:cut], true
			}
		} else if c != "" {
			row.Values[c] = []byte{} // routing does not read it; the body is not shown
		}
		switch {
		case rtErr != nil:
			r.RouteErr = "the router could not be built: " + rtErr.Error()
		case rt == nil:
		default:
			if m, err := rt.Route(row); err != nil {
				r.RouteErr = err.Error()
			} else {
				r.MessageID, r.Exchange, r.RoutingKey = m.Publishing.MessageId, m.Exchange, m.RoutingKey
			}
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
