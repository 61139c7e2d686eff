package discover

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Proposal is how the relay should read one table.
type Proposal struct {
	// Table is the whole mapping, the preset applied: what the relay
	// would run with.
	Table outbox.Table
	// Preset is the preset recognised, "" for a mapping of the table's own.
	Preset string
	// Cleared are the columns fields of the preset the table does not
	// have ("version"), written as "" over the preset.
	Cleared []string
	// HeadersChanged says the preset's columns.headers was changed (some
	// of its columns are missing, or the table has more worth sending).
	HeadersChanged bool
	// Why explains a choice, by the key it is written under
	// ("columns.status", "statuses.pending"; "" for the table).
	Why map[string]string
	// Remarks are what the user should know of the mapping (a table
	// without a status column publishes every insert once), written as
	// comments.
	Remarks []string
	// Notes are what Propose could not decide: comments in the config and
	// lines on stderr.
	Notes []Note
}

// Note is one thing init could not decide, under the key it concerns.
type Note struct {
	Key  string // "columns.payload", "route.exchange"; "" for the table
	Text string
}

func (n Note) String() string {
	if n.Key == "" {
		return n.Text
	}
	return n.Key + ": " + n.Text
}

// UnmappableError is a table the relay cannot read: Missing says what it
// lacks, one item each.
type UnmappableError struct {
	Table   string
	Missing []string
}

func (e *UnmappableError) Error() string {
	return fmt.Sprintf("%s cannot be relayed: %s", e.Table, strings.Join(e.Missing, "; "))
}

// Propose recognises a preset in t, or maps it column by column. It
// returns an *UnmappableError when the table has no single-column primary
// key or no column that can hold the payload.
func Propose(t *Table) (*Proposal, error) {
	if p := recognise(t); p != nil {
		return p, nil
	}
	m := &mapper{t: t, used: map[string]bool{}, p: &Proposal{Why: map[string]string{}}}
	if err := m.mapTable(); err != nil {
		return nil, err
	}
	return m.p, nil
}

// optionalFields are the columns fields of a preset a table may lack: the
// bookkeeping the relay does without (no version: no optimistic check, no
// next_retry_time: the sweeper goes by created_at, ...).
var optionalFields = []string{"retry_count", "max_retry_count", "next_retry_time", "error", "created_at", "updated_at", "version"}

// recognise returns the preset t is, or nil: every column the preset
// routes and publishes by is there with a fitting type, and its status
// values are the preset's. When several fit, the one that maps the most
// of the table's columns wins.
func recognise(t *Table) *Proposal {
	var best *Proposal
	bestScore := 0
	for _, name := range outbox.PresetNames() {
		p, score := fitPreset(t, name)
		if p != nil && score > bestScore {
			best, bestScore = p, score
		}
	}
	return best
}

// fitPreset tries one preset on t; score counts the columns it maps.
func fitPreset(t *Table, name string) (*Proposal, int) {
	tb, err := outbox.Preset(name)
	if err != nil {
		return nil, 0
	}
	// Rows are marked by the id: it must name one row.
	if !t.keyColumn(tb.Columns.ID) {
		return nil, 0
	}
	p := &Proposal{Preset: name, Why: map[string]string{}}
	fields := map[string]*string{"retry_count": &tb.Columns.RetryCount, "max_retry_count": &tb.Columns.MaxRetryCount,
		"next_retry_time": &tb.Columns.NextRetryTime, "error": &tb.Columns.Error, "created_at": &tb.Columns.CreatedAt,
		"updated_at": &tb.Columns.UpdatedAt, "version": &tb.Columns.Version}
	score := 0
	for field, col := range tb.MappedColumns() {
		c, ok := t.column(col)
		opt := strings.HasPrefix(field, "columns.headers[") || slices.Contains(optionalFields, strings.TrimPrefix(field, "columns."))
		switch {
		case ok:
			score++
		case opt && strings.HasPrefix(field, "columns.headers["):
			p.HeadersChanged = true
		case opt:
			p.Cleared = append(p.Cleared, strings.TrimPrefix(field, "columns."))
		default:
			return nil, 0 // a column it routes or publishes by is missing
		}
		if ok && !fits(field, c, tb) {
			return nil, 0
		}
	}
	if st := tb.Columns.Status; st != "" {
		c, _ := t.column(st)
		known := append(c.enumValues(), t.Values[strings.ToLower(st)]...)
		values := []string{tb.Statuses.Pending, tb.Statuses.Sending, tb.Statuses.Sent, tb.Statuses.Failed}
		for _, v := range known {
			if !slices.Contains(values, v) {
				return nil, 0 // its own values: a mapping of its own says which
			}
		}
	}
	for _, f := range p.Cleared {
		*fields[f] = ""
	}
	if p.HeadersChanged {
		var keep []string
		for _, h := range tb.Columns.Headers {
			if _, ok := t.column(h); ok {
				keep = append(keep, h)
			}
		}
		tb.Columns.Headers = keep
	}
	slices.Sort(p.Cleared)
	tb.Schema, tb.Name = t.Schema, t.Name
	p.Table = tb
	p.Why[""] = fmt.Sprintf("recognised: the %s preset (docs/presets.md#%s)", name, name)
	if len(p.Cleared) > 0 {
		p.Why[""] += "; the table lacks " + strings.Join(p.Cleared, ", ") + ", cleared below"
	}
	// What the preset leaves out and the table has.
	if name == "debezium" {
		if _, ok := t.column("tracingspancontext"); ok {
			p.Table.Trace = outbox.Trace{Format: outbox.TraceDebezium}
			p.Why["trace"] = "the tracingspancontext column: its trace context as the traceparent and tracestate headers"
		}
		p.Remarks = append(p.Remarks, noStatus,
			"the exchange is the row's aggregatetype: declare one exchange per aggregate type, or map them with route.exchange_map (docs/presets.md#debezium)")
	}
	p.noteMessageID(t)
	p.noteInbox(t)
	return p, score
}

// fits reports whether column c can be what field maps in the preset tb.
func fits(field string, c Column, tb outbox.Table) bool {
	switch field {
	case "columns.payload":
		return c.textual()
	case "columns.status":
		if tb.Statuses.Numeric {
			return c.integer()
		}
		return c.DataType == "enum" || c.DataType == "char" || c.DataType == "varchar"
	case "columns.retry_count", "columns.max_retry_count", "columns.version":
		return c.integer()
	case "columns.next_retry_time", "columns.updated_at":
		return c.temporal()
	case "columns.created_at":
		if tb.CreatedAtEpoch != "" {
			return c.integer()
		}
		return c.temporal()
	}
	return true
}

// noStatus is what a table without a status column means.
const noStatus = "no status column: every inserted row is published once and nothing is written back; " +
	"a row the broker refuses holds the stream until it goes through, unless broker.dead_letter_exchange is set"

// noteInbox says when the table looks like a consumer's inbox
// (pkg/inbox's consumer_message, the seed's), which is not an outbox.
func (p *Proposal) noteInbox(t *Table) {
	for _, c := range []string{"first_consume_time", "success_time", "consumer"} {
		if _, ok := t.column(c); ok {
			p.Notes = append(p.Notes, Note{Text: fmt.Sprintf("the column %q says this is a consumer's inbox (pkg/inbox, docs/inbox.md), which the consumers write: the relay publishes outbox tables", c)})
			return
		}
	}
}

// noteMessageID warns when the message-id column is not unique on its
// own, as check will.
func (p *Proposal) noteMessageID(t *Table) {
	col := p.Table.Columns.MessageID
	if col == "" || strings.EqualFold(col, p.Table.Columns.ID) || t.uniqueAlone(col) != "" {
		return
	}
	p.Notes = append(p.Notes, Note{Key: "columns.message_id", Text: fmt.Sprintf(
		"column %q has no unique index of its own: several rows may share a message id, and consumers that deduplicate by it would drop events (check warns too); add a unique key, or map message_id to the primary key %q", col, p.Table.Columns.ID)})
}

// mapper maps a table of its own, column by column.
type mapper struct {
	t    *Table
	used map[string]bool // lower-case names already mapped
	p    *Proposal
}

func (m *mapper) why(key, format string, args ...any) { m.p.Why[key] = fmt.Sprintf(format, args...) }
func (m *mapper) note(key, format string, args ...any) {
	m.p.Notes = append(m.p.Notes, Note{Key: key, Text: fmt.Sprintf(format, args...)})
}

// pick returns the unused column whose name fits names best among those
// ok accepts, or "".
func (m *mapper) pick(names []string, ok func(Column) bool) (Column, bool) {
	best, bestRank := Column{}, 0
	for _, c := range m.t.Columns {
		if m.used[strings.ToLower(c.Name)] || !ok(c) {
			continue
		}
		if r := rank(c.Name, names); r > bestRank {
			best, bestRank = c, r
		}
	}
	if bestRank == 0 {
		return Column{}, false
	}
	m.used[strings.ToLower(best.Name)] = true
	return best, true
}

func short(c Column) bool {
	return c.DataType == "enum" || ((c.textual() || c.integer()) && !c.large())
}
func name(c Column) bool { return c.DataType == "enum" || (c.textual() && !c.large()) }

// mapTable fills m.p with a mapping of the table's own.
func (m *mapper) mapTable() error {
	t, tb := m.t, &m.p.Table
	tb.Schema, tb.Name = t.Schema, t.Name
	var missing []string
	id, idWhy := m.idColumn()
	if id == "" {
		missing = append(missing, idWhy)
	} else {
		tb.Columns.ID = id
		m.used[strings.ToLower(id)] = true
		m.why("columns.id", "%s: rows are marked by it", idWhy)
	}

	if c, ok := m.pick(statusNames, func(c Column) bool { return c.integer() || c.DataType == "enum" || name(c) }); ok {
		tb.Columns.Status = c.Name
		g := statusValues(c, t.Values[strings.ToLower(c.Name)])
		tb.Statuses = g.statuses
		m.why("columns.status", "%s", c.ColumnType)
		for _, s := range states {
			if w := g.why[s]; w != "" {
				m.why("statuses."+s, "%s", w)
			}
		}
		m.why("statuses.publishable", "a row inserted with one of these is published")
		m.p.Notes = append(m.p.Notes, g.notes...)
	} else {
		m.p.Remarks = append(m.p.Remarks, noStatus)
	}

	if c, ok := m.pick(messageIDNames, short); ok {
		tb.Columns.MessageID = c.Name
		if u := t.uniqueAlone(c.Name); u != "" {
			m.why("columns.message_id", "the AMQP message-id; unique index %s", u)
		} else {
			m.why("columns.message_id", "the AMQP message-id")
		}
	} else if pk, ok := t.column(id); ok && id != "" && pk.textual() {
		tb.Columns.MessageID = id
		m.why("columns.message_id", "no message-id column: the primary key, a string, is the AMQP message-id")
	} else if id != "" {
		m.why("columns.message_id", "no message-id column: the AMQP message-id is %s.%s:<id>", t.Schema, t.Name)
	}

	if c, ok := m.pick(exchangeNames, name); ok {
		tb.Columns.Exchange = c.Name
		m.why("columns.exchange", "the exchange each row names")
	} else {
		tb.Route.Exchange = t.Schema
		m.note("route.exchange", "no exchange column (exchange, topic, destination...): every row goes to the exchange %q; set the one your consumers bind to", t.Schema)
	}
	if c, ok := m.pick(routingKeyNames, name); ok {
		tb.Columns.RoutingKey = c.Name
		m.why("columns.routing_key", "the routing key each row names")
	} else {
		m.note("route.routing_key", `no routing-key column (routing_key, tag, type...): messages are published with the routing key ""; set route.routing_key (a template such as "order.{kind}") if your bindings need one`)
	}

	payload, ok := m.pick(payloadNames, func(c Column) bool { return c.textual() })
	if ok {
		tb.Columns.Payload = payload.Name
		m.why("columns.payload", "%s", payload.ColumnType)
	}
	m.bookkeeping()
	if !ok {
		payload, ok = m.payloadByType()
	}
	if !ok {
		missing = append(missing, "no payload column: the relay needs a TEXT, BLOB, JSON or VARCHAR column holding the message body (named payload, content, body, data... when there are several)")
	}
	if len(missing) > 0 {
		return &UnmappableError{Table: t.Schema + "." + t.Name, Missing: missing}
	}
	if payload.DataType == "json" {
		tb.Route.ContentType = "application/json"
		m.why("route.content_type", "the payload column is JSON")
	}
	m.headers()
	m.p.noteMessageID(t)
	m.p.noteInbox(t)
	if tb.Columns.Status != "" && tb.Columns.MaxRetryCount == "" {
		tb.MaxRetries = 5
		if tb.Statuses.Failed != "" {
			m.why("max_retries", "no max-retry column: after this many failed attempts a row is set to %q", tb.Statuses.Failed)
		} else {
			m.why("max_retries", "no max-retry column, and no failed value: a row that keeps failing stays %q for the sweeper", tb.Statuses.RetryValue())
		}
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return fmt.Sprintf("%q", a)
	}
	return b
}

// idColumn is the primary key's column, or a unique NOT NULL column when
// there is no primary key; why says which, or what is missing.
func (m *mapper) idColumn() (col, why string) {
	pk := m.t.primaryKey()
	switch {
	case len(pk) == 1:
		return pk[0], "primary key"
	case len(pk) > 1:
		return "", fmt.Sprintf("no single-column primary key (it has one over %s): the relay marks each row by one id column", strings.Join(pk, ", "))
	}
	for _, i := range m.t.Indexes {
		if c, ok := m.t.column(i.Columns[0]); ok && i.Unique && len(i.Columns) == 1 && !c.Nullable {
			m.note("columns.id", "no primary key: rows are marked by the unique NOT NULL column %q (index %s); a primary key is better", c.Name, i.Name)
			return c.Name, "unique index " + i.Name
		}
	}
	return "", "no primary key (nor a unique NOT NULL column): the relay marks each row by it; add one, e.g. id BIGINT AUTO_INCREMENT PRIMARY KEY"
}

// bookkeeping maps the retry, error, time and version columns.
func (m *mapper) bookkeeping() {
	t, tb := m.t, &m.p.Table
	integer := func(c Column) bool { return c.integer() }
	temporal := func(c Column) bool { return c.temporal() }
	if tb.Columns.Status != "" {
		if c, ok := m.pick(retryCountNames, integer); ok {
			tb.Columns.RetryCount = c.Name
		}
		if c, ok := m.pick(maxRetryNames, integer); ok {
			tb.Columns.MaxRetryCount = c.Name
		}
		if c, ok := m.pick(nextRetryNames, temporal); ok {
			tb.Columns.NextRetryTime = c.Name
		}
		if c, ok := m.pick(errorNames, func(c Column) bool { return c.textual() }); ok {
			tb.Columns.Error = c.Name
			m.why("columns.error", "the reason a row failed is written here")
		}
		if c, ok := m.pick(versionNames, integer); ok {
			tb.Columns.Version = c.Name
			m.why("columns.version", "optimistic check: version+1 on every write")
		}
	}
	if c, ok := m.pick(createdNames, func(c Column) bool { return c.temporal() || c.integer() }); ok {
		tb.Columns.CreatedAt = c.Name
		if c.integer() {
			tb.CreatedAtEpoch = epochUnit(t.Values[strings.ToLower(c.Name)])
			if tb.CreatedAtEpoch == "" {
				tb.CreatedAtEpoch = "ms"
				m.note("created_at_epoch", "column %q is an integer and the table has no rows to tell seconds from milliseconds: wrote ms", c.Name)
			} else {
				m.why("created_at_epoch", "%q is an integer: %s since the epoch, by its values", c.Name, map[string]string{"s": "seconds", "ms": "milliseconds"}[tb.CreatedAtEpoch])
			}
		}
	}
	if tb.Columns.Status != "" {
		if c, ok := m.pick(updatedNames, temporal); ok {
			tb.Columns.UpdatedAt = c.Name
		}
		if tb.Columns.NextRetryTime == "" {
			m.why("columns.next_retry_time", "none: the sweeper goes by %s", cmpOr(tb.Columns.CreatedAt, "the grace period alone"))
		}
	}
}

// epochUnit tells seconds from milliseconds by the values present: a
// millisecond count of any date after 1973 is over 1e11, a second count
// stays under it until the year 5138.
func epochUnit(vals []string) string {
	for _, v := range vals {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > 0 {
			if n > 1e11 {
				return "ms"
			}
			return "s"
		}
	}
	return ""
}

// payloadByType is the payload when no column is named like one: the
// largest TEXT, BLOB or JSON column left, said to be a choice.
func (m *mapper) payloadByType() (Column, bool) {
	size := map[string]int{"longtext": 6, "longblob": 6, "json": 5, "mediumtext": 4, "mediumblob": 4, "text": 3, "blob": 3, "tinytext": 1, "tinyblob": 1}
	var cands []Column
	for _, c := range m.t.Columns {
		if !m.used[strings.ToLower(c.Name)] && c.large() {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		return Column{}, false
	}
	slices.SortStableFunc(cands, func(a, b Column) int { return size[b.DataType] - size[a.DataType] })
	c := cands[0]
	m.used[strings.ToLower(c.Name)] = true
	m.p.Table.Columns.Payload = c.Name
	if len(cands) == 1 {
		m.why("columns.payload", "%s, the only TEXT, BLOB or JSON column", c.ColumnType)
		return c, true
	}
	var others []string
	for _, o := range cands[1:] {
		others = append(others, o.Name)
	}
	m.why("columns.payload", "%s", c.ColumnType)
	m.note("columns.payload", "no column is named like a payload (payload, content, body...): chose %q, the largest of the TEXT, BLOB and JSON columns (also %s)", c.Name, strings.Join(others, ", "))
	return c, true
}

// headers maps a headers document, the columns consumers route or
// correlate by, a trace context, and suggests an ordering key.
func (m *mapper) headers() {
	t, tb := m.t, &m.p.Table
	if c, ok := m.pick(headersNames, func(c Column) bool { return c.textual() }); ok {
		tb.Columns.Headers = append(tb.Columns.Headers, c.Name)
		tb.Route.ExpandHeaders = true
		m.why("route.expand_headers", "%q holds a JSON object of headers: one AMQP header per key", c.Name)
	}
	for _, c := range t.Columns {
		if rank(c.Name, headerNames) > 0 && short(c) {
			tb.Columns.Headers = append(tb.Columns.Headers, c.Name)
		}
	}
	if len(tb.Columns.Headers) > 0 {
		m.why("columns.headers", "copied into AMQP headers (NULL: left out)")
	}
	for _, tr := range []struct{ col, format string }{{"traceparent", outbox.TraceTraceparent}, {"tracingspancontext", outbox.TraceDebezium}} {
		if c, ok := t.column(tr.col); ok && c.textual() && !m.used[strings.ToLower(c.Name)] {
			tb.Trace = outbox.Trace{Format: tr.format}
			if _, ok := t.column("tracestate"); ok && tr.format == outbox.TraceTraceparent {
				tb.Trace.TracestateColumn = "tracestate"
			}
			m.why("trace", "the %s column: the row's trace context as the traceparent and tracestate headers", c.Name)
			break
		}
	}
	for _, c := range t.Columns {
		if rank(c.Name, partitionNames) > 0 {
			m.p.Remarks = append(m.p.Remarks, fmt.Sprintf("to publish on several channels (relay.lanes), route.partition_key: %s keeps each %s's events in order (docs/ordering.md)", c.Name, c.Name))
			break
		}
	}
}
