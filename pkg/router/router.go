// Package router turns an outbox row into an AMQP message: exchange, routing
// key, message id, properties and headers, all from the table's mapping.
//
// Build a Router once over the validated tables (pkg/outbox) and call Route
// for each row a source gives (pkg/binlog's KindRow events, or a row read
// by SQL): the Message holds the exchange, the routing key and an
// amqp091.Publishing, persistent, with the message id and the mapped
// headers. Publish it mandatory, with publisher confirms: a return or a
// nack is a failure. A row that cannot be routed is an error wrapping
// ErrNoRoute, never a message with a part missing.
package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Message is a routed row ready to publish.
type Message struct {
	Row        *outbox.Row
	Exchange   string
	RoutingKey string
	Publishing amqp.Publishing
	// PartitionKey is the rendered route.partition_key; Keyed is false when
	// the table has none or a column of it is NULL (the row has no key).
	PartitionKey string
	Keyed        bool
}

// ErrNoRoute marks a row that cannot be routed (no exchange, a template
// column that is NULL). Such a row is a failure with this reason, never a
// crash.
var ErrNoRoute = errors.New("no route")

// ErrNullField marks a row whose exchange or message id column is NULL:
// the row itself can never be published, so retrying it is pointless (the
// relay marks it FAILED at once, with the reason). It comes wrapped with
// ErrNoRoute.
var ErrNullField = errors.New("required column is NULL")

// Router routes rows of a set of tables. Templates are parsed once.
// A Router is safe for concurrent use.
type Router struct {
	tables          map[*outbox.Table]*tableRoute
	appID           string
	onHeaderProblem HeaderProblem
}

// An Option configures a Router.
type Option func(*Router)

// WithAppID sets the AMQP app-id property of every message (the relay sets
// its name). Without it messages carry no app-id.
func WithAppID(id string) Option { return func(r *Router) { r.appID = id } }

// WithHeaderProblem has f told about each trace context or CloudEvents
// header left out of a message because the row's value does not fit it.
// The message is built without that header either way.
func WithHeaderProblem(f HeaderProblem) Option { return func(r *Router) { r.onHeaderProblem = f } }

// AppID is the app-id the router sets on messages ("" for none).
func (r *Router) AppID() string { return r.appID }

type tableRoute struct {
	exchange    colval.Template
	routingKey  colval.Template
	partition   colval.Template // empty: no partition key
	contentType string
	ce          *ceTemplates // nil without cloudevents.enabled
}

// New parses the routes of the tables, which must have passed
// outbox.Table.Validate. Rows of any other table are refused by Route.
func New(tables []*outbox.Table, opts ...Option) (*Router, error) {
	r := &Router{tables: map[*outbox.Table]*tableRoute{}}
	for _, o := range opts {
		o(r)
	}
	for _, t := range tables {
		exT, rkT := t.RouteTemplates()
		ex, err := colval.ParseTemplate(exT)
		if err != nil {
			return nil, fmt.Errorf("table %s route.exchange: %w", t.FullName(), err)
		}
		rk, err := colval.ParseTemplate(rkT)
		if err != nil {
			return nil, fmt.Errorf("table %s route.routing_key: %w", t.FullName(), err)
		}
		pk, err := colval.ParseTemplate(t.PartitionKeyTemplate())
		if err != nil {
			return nil, fmt.Errorf("table %s route.partition_key: %w", t.FullName(), err)
		}
		ct := t.Route.ContentType
		if ct == "" {
			ct = "application/json"
		}
		ce, err := parseCE(t)
		if err != nil {
			return nil, err
		}
		r.tables[t] = &tableRoute{exchange: ex, routingKey: rk, partition: pk, contentType: ct, ce: ce}
		if t.Entry != nil && r.tables[t.Entry] == nil {
			// A table a pattern entry matched: the entry's route serves
			// every table it matches later too (lookup).
			r.tables[t.Entry] = r.tables[t]
		}
	}
	return r, nil
}

// lookup is the route of a table's rows: its own, or for a table its
// pattern entry matched after the router was built (a tenant created while
// streaming), the entry's. The templates do not depend on the table: its
// schema and name are filled in per row ({schema}, {table}).
func (r *Router) lookup(t *outbox.Table) *tableRoute {
	if tr := r.tables[t]; tr != nil {
		return tr
	}
	if t.Entry != nil {
		return r.tables[t.Entry]
	}
	return nil
}

// Route builds the message for a row of one of the router's tables. A row
// that cannot be routed (a template column NULL, no entry in the exchange
// map, a NULL message id) is an error wrapping ErrNoRoute, and ErrNullField
// too when retrying cannot help.
func (r *Router) Route(row *outbox.Row) (*Message, error) {
	t := row.Table
	tr := r.lookup(t)
	exchange, rk, err := r.Destination(row)
	if err != nil {
		return nil, err
	}
	if c := t.Columns.MessageID; c != "" && row.Values[c] == nil {
		// A made-up id would let two such rows collide in a consumer's
		// deduplication, or one row change id between attempts: the row is
		// refused, so it ends FAILED with this reason.
		return nil, fmt.Errorf("%w: message id column %q is NULL or missing (%w)", ErrNoRoute, c, ErrNullField)
	}
	msgID := MessageID(row)
	body := colval.ValueBytes(row.Values[t.Columns.Payload])
	if t.Route.ExpandPayload {
		body = unwrapJSONString(body)
	}
	if t.Eventuate.Envelope {
		body = eventuateEnvelope(row, msgID, body) // eventuate.go
	}
	pub := amqp.Publishing{
		MessageId:    msgID,
		ContentType:  tr.contentType,
		DeliveryMode: amqp.Persistent,
		Timestamp:    time.Now().UTC(),
		AppId:        r.appID,
		Body:         body,
	}
	m := &Message{Row: row, Exchange: exchange, RoutingKey: rk}
	lookup := rowLookup(row)
	if !tr.partition.Empty() {
		var missing string
		m.PartitionKey, missing = tr.partition.Render(lookup)
		m.Keyed = missing == ""
		if h := t.Route.PartitionHeader; h != "" && m.Keyed {
			pub.Headers = amqp.Table{h: m.PartitionKey}
		}
	}
	if len(t.Columns.Headers) > 0 {
		if pub.Headers == nil {
			pub.Headers = amqp.Table{}
		}
		headers(row, pub.Headers)
	}
	r.mappedHeaders(row, tr, &pub, lookup) // headers.go
	if h := t.SchemaHeader(); h != "" {
		if pub.Headers == nil {
			pub.Headers = amqp.Table{}
		}
		pub.Headers[h] = t.Schema
	}
	m.Publishing = pub
	return m, nil
}

// headers copies the table's header columns into h.
func headers(row *outbox.Row, h amqp.Table) {
	t := row.Table
	for _, col := range t.Columns.Headers {
		v, ok := row.Values[col]
		if !ok || v == nil {
			// NULL (or a column the table no longer has): no header.
			continue
		}
		if t.Route.ExpandHeaders && expandJSONObject(h, v) {
			continue
		}
		h[col] = colval.ValueStringIn(v, t.Location())
	}
}

// Destination is the exchange and routing key a row is published to (what
// Route puts in its Message), without building the message.
func (r *Router) Destination(row *outbox.Row) (exchange, routingKey string, err error) {
	t := row.Table
	tr := r.lookup(t)
	if tr == nil {
		return "", "", fmt.Errorf("%w: table %s is not configured", ErrNoRoute, t.FullName())
	}
	lookup := rowLookup(row)
	exchange, err = r.exchange(row, tr, lookup)
	if err != nil {
		return "", "", err
	}
	rk, missing := tr.routingKey.Render(lookup)
	if missing != "" && isNullColumn(row, tr.routingKey, missing) {
		// The routing key is one nullable column (t_message_record.tag
		// DEFAULT NULL): NULL means "no key", which AMQP spells "". A
		// template with more than the column keeps refusing, so a route
		// never silently loses a segment.
		rk, missing = "", ""
	}
	if missing != "" {
		return "", "", fmt.Errorf("%w: routing key column %q is NULL or missing", ErrNoRoute, missing)
	}
	return exchange, rk, nil
}

// rowLookup reads a row's columns for templates: times in the table's zone
// and format, every other value as it is (Render formats it as ValueString
// does, without boxing a new string), NULL as nil.
func rowLookup(row *outbox.Row) func(string) (any, bool) {
	return func(column string) (any, bool) {
		switch column {
		case colval.SchemaPlaceholder:
			return row.Table.Schema, true
		case colval.TablePlaceholder:
			return row.Table.Name, true
		}
		v, ok := row.Get(column)
		if tm, isTime := v.(time.Time); isTime {
			return colval.ValueStringIn(tm, row.Table.Location()), true
		}
		return v, ok
	}
}

// RouteColumns lists the columns Destination reads for rows of t.
func RouteColumns(t *outbox.Table) []string {
	var cols []string
	add := func(c string) {
		if c != "" && !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
	}
	ex, rk := t.RouteTemplates()
	for _, s := range []string{ex, rk} {
		tmpl, _ := colval.ParseTemplate(s)
		for _, c := range tmpl.Columns() {
			add(c)
		}
	}
	add(t.Route.ExchangeMapColumn)
	return cols
}

func (r *Router) exchange(row *outbox.Row, tr *tableRoute, lookup func(string) (any, bool)) (string, error) {
	t := row.Table
	if len(t.Route.ExchangeMap) > 0 {
		key := colval.ValueStringIn(row.Values[t.Route.ExchangeMapColumn], t.Location())
		if ex, ok := t.Route.ExchangeMap[key]; ok {
			return ex, nil
		}
		if tr.exchange.Empty() {
			return "", fmt.Errorf("%w: %s=%q has no entry in route.exchange_map", ErrNoRoute, t.Route.ExchangeMapColumn, key)
		}
	}
	ex, missing := tr.exchange.Render(lookup)
	if missing != "" {
		return "", fmt.Errorf("%w: exchange column %q is NULL or missing (%w)", ErrNoRoute, missing, ErrNullField)
	}
	if ex == "" {
		return "", fmt.Errorf("%w: the exchange is empty", ErrNoRoute)
	}
	return ex, nil
}

// isNullColumn reports whether tmpl is exactly the placeholder {col} and
// the row has col, NULL.
func isNullColumn(row *outbox.Row, tmpl colval.Template, col string) bool {
	if c, ok := tmpl.SingleColumn(); !ok || c != col {
		return false
	}
	v, ok := row.Get(col)
	return ok && v == nil
}

// MessageID is the AMQP message-id of a row: its message id column, or
// "schema.table:id" when the table has none (Route refuses a row whose
// message id column is NULL; logs still name it by the fallback).
func MessageID(row *outbox.Row) string {
	t := row.Table
	if t.Columns.MessageID != "" {
		if v, ok := row.Values[t.Columns.MessageID]; ok && v != nil {
			return colval.ValueStringIn(v, t.Location())
		}
	}
	return t.FullName() + ":" + colval.ValueStringIn(row.ID, t.Location())
}

// expandJSONObject copies the keys of a JSON object value into headers and
// reports whether v was one. Strings stay strings, booleans booleans,
// integral numbers become int64 and other numbers float64; null is left out;
// nested objects and arrays are kept as their JSON text.
func expandJSONObject(headers amqp.Table, v any) bool {
	obj, ok := jsonObject(v)
	if !ok {
		return false
	}
	for k, val := range obj {
		switch val[0] {
		case '"':
			var s string
			if json.Unmarshal(val, &s) == nil {
				headers[k] = s
			}
		case 't', 'f':
			headers[k] = val[0] == 't'
		case 'n':
			// null: no header
		case '{', '[':
			var buf bytes.Buffer
			if json.Compact(&buf, val) == nil {
				headers[k] = buf.String()
			}
		default:
			n := json.Number(val)
			if i, err := n.Int64(); err == nil {
				headers[k] = i
			} else if f, err := n.Float64(); err == nil {
				headers[k] = f
			}
		}
	}
	return true
}

// jsonObject parses a column value holding one JSON object into its keys'
// raw values; ok is false for anything else.
func jsonObject(v any) (map[string]json.RawMessage, bool) {
	raw := bytes.TrimSpace(colval.ValueBytes(v))
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var obj map[string]json.RawMessage
	if err := dec.Decode(&obj); err != nil || dec.More() {
		return nil, false
	}
	return obj, true
}

// unwrapJSONString returns the content of a payload that is a single JSON
// string literal, and any other payload unchanged.
func unwrapJSONString(body []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) < 2 || trimmed[0] != '"' {
		return body
	}
	var s string
	if err := json.Unmarshal(trimmed, &s); err != nil {
		return body
	}
	return []byte(s)
}
