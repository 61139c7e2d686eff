package replay

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/internal/ident"
	"github.com/binlog-relay/binlog-relay/internal/serverclock"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Cond is one --where term: a mapped field compared with a literal. The
// field is checked against the table's mapping and quoted as an identifier;
// the value is always a bound argument, never SQL text, so no --where can
// change the statement's shape (no raw SQL reaches the server).
type Cond struct {
	Field  string // as written: "routing_key" or a mapped column "aggregatetype"
	Column string // the table's column it resolved to
	Not    bool   // != rather than =
	Value  string
}

// ErrBadWhere marks a --where term that does not parse or names no mapped
// field.
var ErrBadWhere = errors.New("bad --where")

// ParseWhere reads one --where term, "field=value" or "field!=value",
// before anything connects; Resolve checks the field against a table.
func ParseWhere(s string) (Cond, error) {
	i := strings.Index(s, "=")
	if i <= 0 {
		return Cond{}, fmt.Errorf("%w %q: want field=value or field!=value over a mapped field (e.g. routing_key=order.created)", ErrBadWhere, s)
	}
	c := Cond{Field: strings.TrimSpace(s[:i]), Value: s[i+1:]}
	if strings.HasSuffix(c.Field, "!") {
		c.Not, c.Field = true, strings.TrimSpace(strings.TrimSuffix(c.Field, "!"))
	}
	for _, r := range c.Field {
		if !(r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return Cond{}, fmt.Errorf("%w %q: the field %q is not a name (letters, digits, _); only field=value terms over mapped fields are accepted, not SQL", ErrBadWhere, s, c.Field)
		}
	}
	if c.Field == "" {
		return Cond{}, fmt.Errorf("%w %q: no field", ErrBadWhere, s)
	}
	return c, nil
}

// whereFields are the fields --where may name on t, by lower-case name:
// each columns.* field the config maps (routing_key, exchange,
// message_id...) and each mapped column by its own name (Debezium's
// aggregatetype, a header column). The payload, status and bookkeeping
// columns are left out: the replay picks SENT rows itself, and a payload
// comparison would scan every row's body.
func whereFields(t *outbox.Table) map[string]string {
	skip := map[string]bool{"columns.payload": true, "columns.status": true, "columns.error": true,
		"columns.next_retry_time": true, "columns.retry_count": true, "columns.max_retry_count": true, "columns.version": true}
	out := map[string]string{}
	for field, col := range t.MappedColumns() {
		if skip[field] {
			continue
		}
		if name, ok := strings.CutPrefix(field, "columns."); ok && !strings.Contains(name, "[") {
			out[strings.ToLower(name)] = col
		}
		out[strings.ToLower(col)] = col
	}
	return out
}

// Resolve binds c to t's columns.
func (c Cond) Resolve(t *outbox.Table) (Cond, error) {
	fields := whereFields(t)
	col, ok := fields[strings.ToLower(c.Field)]
	if !ok {
		names := make([]string, 0, len(fields))
		for k := range fields {
			names = append(names, k)
		}
		sort.Strings(names)
		return c, fmt.Errorf("%w: %s maps no field %q; use one of %s", ErrBadWhere, t.FullName(), c.Field, strings.Join(names, ", "))
	}
	c.Column = col
	return c, nil
}

func (c Cond) String() string {
	op := "="
	if c.Not {
		op = "!="
	}
	return c.Field + op + c.Value
}

// IDRange is --ids A-B, both ends included.
type IDRange struct {
	From, To int64
}

// ParseIDs reads --ids: "A-B" (inclusive) or a single id.
func ParseIDs(s string) (IDRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(s), "-")
	if !ok {
		b = a
	}
	from, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 64)
	to, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 64)
	if err1 != nil || err2 != nil || from > to {
		return IDRange{}, fmt.Errorf("--ids %q: want A-B, two ids with A <= B (e.g. 1000-1999)", s)
	}
	return IDRange{From: from, To: to}, nil
}

// Range selects the rows a replay sends. Every bound is optional; rows are
// always the table's SENT ones.
type Range struct {
	// Since and Until bound created_at: Since <= created_at < Until.
	Since, Until time.Time
	IDs          *IDRange
	Where        []Cond
}

// Describe renders the range for messages and the saved progress.
func (r Range) Describe() string {
	var parts []string
	if !r.Since.IsZero() {
		parts = append(parts, "since "+r.Since.UTC().Format(time.RFC3339))
	}
	if !r.Until.IsZero() {
		parts = append(parts, "until "+r.Until.UTC().Format(time.RFC3339))
	}
	if r.IDs != nil {
		parts = append(parts, fmt.Sprintf("ids %d-%d", r.IDs.From, r.IDs.To))
	}
	for _, c := range r.Where {
		parts = append(parts, "where "+c.String())
	}
	if len(parts) == 0 {
		return "every SENT row"
	}
	return "SENT rows " + strings.Join(parts, ", ")
}

// filter is a range as SQL over one table: the condition and its
// arguments, with the created_at bounds in the server's clock.
type filter struct {
	cond string
	args []any
}

// buildFilter turns r into a condition on t, created_at bounds converted
// with clk (the server's clock). Identifiers come from the config (checked
// by outbox.Table.Validate) and are quoted; every value is an argument.
func buildFilter(t *outbox.Table, r Range, clk serverclock.Clock) (filter, error) {
	c := t.Columns
	var f filter
	add := func(cond string, args ...any) {
		if f.cond != "" {
			f.cond += " AND "
		}
		f.cond += cond
		f.args = append(f.args, args...)
	}
	if c.Status == "" {
		return f, fmt.Errorf("%s has no status column (columns.status), so nothing tells a row the broker confirmed from one the relay has yet to publish; replay sends only SENT rows", t.FullName())
	}
	if t.Statuses.Sent == "" {
		return f, fmt.Errorf("%s has no sent status value (statuses.sent); replay sends only SENT rows", t.FullName())
	}
	add(ident.Quote(c.Status) + " = ?")
	if t.Statuses.Numeric {
		n, err := strconv.ParseInt(t.Statuses.Sent, 10, 64)
		if err != nil {
			return f, fmt.Errorf("%s statuses.sent %q is not a number", t.FullName(), t.Statuses.Sent)
		}
		f.args = append(f.args, n)
	} else {
		f.args = append(f.args, t.Statuses.Sent)
	}
	if !r.Since.IsZero() || !r.Until.IsZero() {
		if c.CreatedAt == "" {
			return f, fmt.Errorf("%s has no columns.created_at, which --since and --until are measured on; use --ids", t.FullName())
		}
		if !r.Since.IsZero() {
			add(ident.Quote(c.CreatedAt)+" >= ?", clk.Value(r.Since, t.CreatedAtEpoch))
		}
		if !r.Until.IsZero() {
			add(ident.Quote(c.CreatedAt)+" < ?", clk.Value(r.Until, t.CreatedAtEpoch))
		}
	}
	if r.IDs != nil {
		add(ident.Quote(c.ID)+" BETWEEN ? AND ?", r.IDs.From, r.IDs.To)
	}
	for _, w := range r.Where {
		w, err := w.Resolve(t)
		if err != nil {
			return f, err
		}
		op := " = ?"
		if w.Not {
			op = " <> ?"
		}
		add(ident.Quote(w.Column)+op, w.Value)
	}
	return f, nil
}
