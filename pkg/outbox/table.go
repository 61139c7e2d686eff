// Package outbox describes an outbox table the way binlog-relay reads it:
// which columns hold the id, message id, route, payload and bookkeeping,
// which status values mean what, and how a row is routed. A Table is what a
// user writes under tables: in the relay's configuration (the yaml tags are
// those keys), or builds in Go: start from a Preset (the five common
// layouts: PresetNames), set Schema, override what differs, then Validate,
// which every consumer of a Table expects. Row is one inserted row of it.
// The binlog reader (pkg/binlog) and the router (pkg/router) both speak
// these types.
//
// The statements the relay runs over outbox rows are not part of this
// package: they stay inside the relay.
package outbox

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	// The zone database is embedded so route.time_zone works on hosts and
	// images without /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/binlog-relay/binlog-relay/internal/colval"
	"github.com/binlog-relay/binlog-relay/internal/ident"
)

// Columns maps the relay's notions to the table's column names. An empty name
// means the table has no such column: the relay then neither reads nor writes it.
type Columns struct {
	// ID is the primary key (required): rows are marked by it.
	ID string `yaml:"id"`
	// MessageID is the AMQP message-id; empty: "schema.table:<id>".
	MessageID string `yaml:"message_id"`
	// Exchange and RoutingKey are columns naming each row's route, when
	// Route does not set it (Table.RouteTemplates).
	Exchange   string `yaml:"exchange"`
	RoutingKey string `yaml:"routing_key"`
	// Payload is the message body (required), published byte for byte.
	Payload string `yaml:"payload"`
	// Status holds the row's state (Statuses); empty: every inserted row
	// is published once and nothing is written back.
	Status string `yaml:"status"`
	// RetryCount, MaxRetryCount, NextRetryTime and Error are the retry
	// bookkeeping written when a publish fails (without MaxRetryCount,
	// Table.MaxRetries applies).
	RetryCount    string `yaml:"retry_count"`
	MaxRetryCount string `yaml:"max_retry_count"`
	NextRetryTime string `yaml:"next_retry_time"`
	Error         string `yaml:"error"`
	// CreatedAt and UpdatedAt are the row's times (the sweeper's grace
	// period reads them); Version is an optimistic-lock counter bumped on
	// every write.
	CreatedAt string `yaml:"created_at"`
	UpdatedAt string `yaml:"updated_at"`
	Version   string `yaml:"version"`
	// Headers are copied into AMQP headers of the same names (a NULL
	// value leaves its header out).
	Headers []string `yaml:"headers"`
}

// Statuses holds the table's own status values, as they are written in SQL:
// strings ('PENDING') or numbers (0). Publishable lists the values that, on an
// inserted row, mean "publish me" (the seed producers insert SENDING too).
type Statuses struct {
	// Pending is what a row goes back to for another attempt; Sending
	// marks a row the sweeper claimed; Sent a row published and confirmed
	// (required with a status column); Failed a row out of attempts, or
	// that can never be published (empty: such a row stays pending).
	Pending     string   `yaml:"pending"`
	Sending     string   `yaml:"sending"`
	Sent        string   `yaml:"sent"`
	Failed      string   `yaml:"failed"`
	Publishable []string `yaml:"publishable"`
	// Numeric marks the status column as numeric (TINYINT, BOOLEAN): values are
	// compared and written as numbers.
	Numeric bool `yaml:"numeric"`
}

// Route says where a row is published. Exchange and RoutingKey are templates:
// "{column}" is replaced by the row's value of that column, anything else is
// literal. When ExchangeMap is set, the exchange is ExchangeMap[value of
// ExchangeMapColumn] (falling back to Exchange).
type Route struct {
	Exchange          string            `yaml:"exchange"`
	RoutingKey        string            `yaml:"routing_key"`
	ExchangeMapColumn string            `yaml:"exchange_map_column"`
	ExchangeMap       map[string]string `yaml:"exchange_map"`
	// ContentType is the AMQP content-type property of every message
	// (empty: none).
	ContentType string `yaml:"content_type"`
	// ExpandHeaders turns a header column holding a JSON object (Eventuate's
	// headers) into one AMQP header per key instead of one header holding
	// the JSON text. A value that is not a JSON object is copied as text.
	ExpandHeaders bool `yaml:"expand_headers"`
	// ExpandPayload unwraps a payload that is a JSON string literal (JSON
	// that was encoded twice, e.g. "{\"a\":1}" stored in a JSON column) and
	// publishes the string's content. Any other payload is published byte for
	// byte, which is also what happens when this is off (the default).
	ExpandPayload bool `yaml:"expand_payload"`
	// TimeZone is the IANA zone (default UTC) in which DATETIME columns are
	// read (they carry no zone) and in which DATETIME and TIMESTAMP values
	// are rendered, as RFC 3339, in headers and templates.
	TimeZone string `yaml:"time_zone"`
	// PartitionKey names the ordering key of a row: a column ("aggregate_id")
	// or a template ("{aggregate_type}:{aggregate_id}"). With relay.lanes
	// above 1, rows are spread over the lanes by a hash of it, and the rows
	// of one key keep their commit order. A row whose key column is NULL
	// has no key: it goes to lane 0.
	PartitionKey string `yaml:"partition_key"`
	// PartitionHeader, when set, names a header that carries the rendered
	// partition key on every message, for a consistent-hash exchange's
	// hash-header on the consumer side (docs/ordering.md).
	PartitionHeader string `yaml:"partition_header"`
	// SchemaHeader names a header that carries the schema of the row's
	// table on every message. Empty: "x-relay-schema" for a pattern entry
	// (a consumer of many tenants' rows tells them apart), none for an
	// entry naming one table; "-": none.
	SchemaHeader string `yaml:"schema_header"`
}

// Table is one outbox table: where it is, what its columns and status
// values mean, and where its rows go. Build it from a Preset or field by
// field, then call Validate.
type Table struct {
	Schema   string   `yaml:"schema"`
	Name     string   `yaml:"name"`
	Preset   string   `yaml:"preset"`
	Columns  Columns  `yaml:"columns"`
	Statuses Statuses `yaml:"statuses"`
	Route    Route    `yaml:"route"`
	// MaxRetries applies when the table has no max retry column.
	MaxRetries int `yaml:"max_retries"`
	// CreatedAtEpoch says how columns.created_at is stored: empty for
	// DATETIME or TIMESTAMP, "s" or "ms" for an integer count since the Unix
	// epoch (Eventuate's creation_time is BIGINT milliseconds).
	CreatedAtEpoch string `yaml:"created_at_epoch"`
	// Trace maps a trace context column to the traceparent and tracestate
	// headers (see Trace).
	Trace Trace `yaml:"trace"`
	// CloudEvents adds the CloudEvents binary-mode ce-* headers (see
	// CloudEvents).
	CloudEvents CloudEvents `yaml:"cloudevents"`
	// Eventuate shapes the body as Eventuate Tram's message (see
	// Eventuate).
	Eventuate Eventuate `yaml:"eventuate"`

	// Entry is the pattern entry this table was matched by (Match), nil
	// for a table configured by its own name: the entry's mapping and
	// route apply to it, and lookups keyed by table fall back to it.
	Entry *Table `yaml:"-"`

	loc *time.Location // route.time_zone, loaded by Validate
}

// checkStatusValue refuses status values that could break out of the SQL
// literal the relay writes them as: quotes, backslashes (an escape unless
// NO_BACKSLASH_ESCAPES) and control characters.
func checkStatusValue(field, v string) error {
	for _, r := range v {
		if r == '\'' || r == '"' || r == '\\' || r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s: %q may not contain quotes, backslashes or control characters", field, v)
		}
	}
	return nil
}

// FullName is schema.table, unquoted, as used in logs and metrics.
func (t *Table) FullName() string { return t.Schema + "." + t.Name }

// Validate checks the table definition and returns every problem at once,
// each prefixed by field and named by its configuration key
// ("tables[0].columns.id: required ..."); pass the label under which the
// caller knows the table. It also loads Route.TimeZone, which Location then
// returns, so call it before handing the table to a reader or router.
func (t *Table) Validate(field string) error {
	errs := t.validateColumns(field)
	errs = append(errs, t.validateStatuses(field)...)
	errs = append(errs, t.validateRoute(field)...)
	if t.MaxRetries < 0 {
		errs = append(errs, fmt.Errorf("%s.max_retries: must be >= 0", field))
	}
	switch t.CreatedAtEpoch {
	case "", "s", "ms":
	default:
		errs = append(errs, fmt.Errorf("%s.created_at_epoch: %q is not empty, \"s\" or \"ms\"", field, t.CreatedAtEpoch))
	}
	errs = append(errs, t.validateHeaders(field))
	if t.Route.TimeZone != "" {
		loc, err := time.LoadLocation(t.Route.TimeZone)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.route.time_zone: %q is not an IANA time zone (e.g. UTC, Asia/Shanghai)", field, t.Route.TimeZone))
		} else {
			t.loc = loc
		}
	}
	// errors.Join drops the nil entries the checks return for valid fields.
	return errors.Join(errs...)
}

// validateColumns checks the table's name and column names (Validate's
// first part; nil entries stand for checks that passed).
func (t *Table) validateColumns(field string) []error {
	var errs []error
	if t.Schema == "" {
		errs = append(errs, fmt.Errorf("%s.schema: required", field))
	} else {
		errs = append(errs, checkNameOrPattern(field+".schema", t.Schema))
	}
	if t.Name == "" {
		errs = append(errs, fmt.Errorf("%s.name: required", field))
	} else {
		errs = append(errs, checkNameOrPattern(field+".name", t.Name))
	}
	if t.Entry != nil && t.IsPattern() {
		errs = append(errs, fmt.Errorf("%s: a table matched by a pattern is itself a pattern (%s)", field, t.FullName()))
	}
	for name, col := range t.columnFields() {
		if col != "" {
			errs = append(errs, ident.Check(field+".columns."+name, col))
		}
	}
	for i, h := range t.Columns.Headers {
		errs = append(errs, ident.Check(fmt.Sprintf("%s.columns.headers[%d]", field, i), h))
	}
	if t.Columns.ID == "" {
		errs = append(errs, fmt.Errorf("%s.columns.id: required (the primary key the relay marks rows by)", field))
	}
	if t.Columns.Payload == "" {
		errs = append(errs, fmt.Errorf("%s.columns.payload: required", field))
	}
	return errs
}

// validateStatuses checks the status values, which matter only when the
// table has a status column.
func (t *Table) validateStatuses(field string) []error {
	if t.Columns.Status == "" {
		return nil
	}
	var errs []error
	if t.Statuses.Sent == "" {
		errs = append(errs, fmt.Errorf("%s.statuses.sent: required when columns.status is set", field))
	}
	if len(t.Statuses.Publishable) == 0 {
		errs = append(errs, fmt.Errorf("%s.statuses.publishable: required when columns.status is set", field))
	}
	errs = append(errs, t.Statuses.checkLifecycle(field+".statuses"))
	values := []struct{ name, v string }{{"pending", t.Statuses.Pending}, {"sending", t.Statuses.Sending},
		{"sent", t.Statuses.Sent}, {"failed", t.Statuses.Failed}}
	for i, v := range t.Statuses.Publishable {
		values = append(values, struct{ name, v string }{fmt.Sprintf("publishable[%d]", i), v})
	}
	for _, sv := range values {
		if sv.v == "" {
			if strings.HasPrefix(sv.name, "publishable") {
				errs = append(errs, fmt.Errorf("%s.statuses.%s: empty", field, sv.name))
			}
			continue
		}
		if t.Statuses.Numeric {
			// Numeric values are written into SQL bare: only a number may pass.
			if _, err := strconv.ParseInt(sv.v, 10, 64); err != nil {
				errs = append(errs, fmt.Errorf("%s.statuses.%s: %q is not a number but statuses.numeric is true", field, sv.name, sv.v))
			}
			continue
		}
		errs = append(errs, checkStatusValue(field+".statuses."+sv.name, sv.v))
	}
	return errs
}

// validateRoute checks where rows are routed: exchange, templates and the
// partition header.
func (t *Table) validateRoute(field string) []error {
	var errs []error
	if t.Route.Exchange == "" && t.Columns.Exchange == "" && len(t.Route.ExchangeMap) == 0 {
		errs = append(errs, fmt.Errorf("%s.route.exchange: set a fixed exchange, a template, an exchange_map or columns.exchange", field))
	}
	if len(t.Route.ExchangeMap) > 0 && t.Route.ExchangeMapColumn == "" {
		errs = append(errs, fmt.Errorf("%s.route.exchange_map_column: required with route.exchange_map", field))
	}
	if t.Route.ExchangeMapColumn != "" {
		errs = append(errs, ident.Check(field+".route.exchange_map_column", t.Route.ExchangeMapColumn))
	}
	ex, rk := t.RouteTemplates()
	for _, tmpl := range []struct{ name, s string }{{"exchange", ex}, {"routing_key", rk}, {"partition_key", t.PartitionKeyTemplate()}} {
		if _, err := colval.ParseTemplate(tmpl.s); err != nil {
			errs = append(errs, fmt.Errorf("%s.route.%s: %w", field, tmpl.name, err))
		}
	}
	if t.Route.PartitionHeader != "" && t.Route.PartitionKey == "" {
		errs = append(errs, fmt.Errorf("%s.route.partition_header: needs route.partition_key (the key it carries)", field))
	}
	if h := t.Route.SchemaHeader; len(h) > 255 {
		errs = append(errs, fmt.Errorf("%s.route.schema_header: %d bytes, AMQP header names are at most 255", field, len(h)))
	}
	if h := t.Route.PartitionHeader; len(h) > 255 {
		errs = append(errs, fmt.Errorf("%s.route.partition_header: %d bytes, AMQP header names are at most 255", field, len(h)))
	}
	return errs
}

func (t *Table) columnFields() map[string]string {
	c := t.Columns
	return map[string]string{
		"id": c.ID, "message_id": c.MessageID, "exchange": c.Exchange, "routing_key": c.RoutingKey,
		"payload": c.Payload, "status": c.Status, "retry_count": c.RetryCount,
		"max_retry_count": c.MaxRetryCount, "next_retry_time": c.NextRetryTime, "error": c.Error,
		"created_at": c.CreatedAt, "updated_at": c.UpdatedAt, "version": c.Version,
	}
}

// RouteTemplates returns the exchange and routing key templates in force:
// route.exchange / route.routing_key when set, otherwise the columns
// columns.exchange / columns.routing_key ("{exchange}"), otherwise empty. So
// overriding a preset's columns.exchange moves the route with it.
func (t *Table) RouteTemplates() (exchange, routingKey string) {
	exchange, routingKey = t.Route.Exchange, t.Route.RoutingKey
	if exchange == "" && t.Columns.Exchange != "" {
		exchange = "{" + t.Columns.Exchange + "}"
	}
	if routingKey == "" && t.Columns.RoutingKey != "" {
		routingKey = "{" + t.Columns.RoutingKey + "}"
	}
	return exchange, routingKey
}

// bookkeeping are the mapped columns only the status writer and the
// sweeper use: the binlog path never reads them from a row.
var bookkeeping = map[string]bool{"columns.next_retry_time": true, "columns.error": true,
	"columns.created_at": true, "columns.updated_at": true, "columns.version": true}

// StreamColumns lists, once each, the columns the binlog path reads from an
// inserted row: MappedColumns less the bookkeeping ones (retry time, error,
// timestamps, version), unless a route, header or key names them too.
// Keeping only these makes each row in flight smaller.
func (t *Table) StreamColumns() []string {
	keep := map[string]bool{}
	for field, col := range t.MappedColumns() {
		if !bookkeeping[field] {
			keep[strings.ToLower(col)] = true
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, col := range t.MappedColumns() {
		lc := strings.ToLower(col)
		if keep[lc] && !seen[lc] {
			seen[lc] = true
			out = append(out, col)
		}
	}
	sort.Strings(out)
	return out
}

// PartitionKeyTemplate is route.partition_key as a template: a bare column
// name ("aggregate_id") reads as "{aggregate_id}"; empty when unset.
func (t *Table) PartitionKeyTemplate() string {
	k := t.Route.PartitionKey
	if k == "" || strings.ContainsAny(k, "{}") {
		return k
	}
	return "{" + k + "}"
}

// MappedColumns lists every column the configuration names (for the start-up
// check that the table has them), keyed by the config field that names it.
func (t *Table) MappedColumns() map[string]string {
	out := map[string]string{}
	for name, col := range t.columnFields() {
		if col != "" {
			out["columns."+name] = col
		}
	}
	for i, h := range t.Columns.Headers {
		out[fmt.Sprintf("columns.headers[%d]", i)] = h
	}
	if t.Route.ExchangeMapColumn != "" {
		out["route.exchange_map_column"] = t.Route.ExchangeMapColumn
	}
	for _, tmpl := range []struct{ name, s string }{{"exchange", t.Route.Exchange}, {"routing_key", t.Route.RoutingKey},
		{"partition_key", t.PartitionKeyTemplate()}} {
		parsed, _ := colval.ParseTemplate(tmpl.s)
		for _, col := range parsed.Columns() {
			out["route."+tmpl.name+" {"+col+"}"] = col
		}
	}
	t.headerColumns(out)
	return out
}

// RetryValue is the status a row goes back to for another attempt (a
// failed publish with retries left, a zombie reset, a requeue):
// statuses.pending, or else the first publishable value that is not
// statuses.sending. Empty when there is none, which Validate refuses.
func (s *Statuses) RetryValue() string {
	if s.Pending != "" {
		return s.Pending
	}
	for _, v := range s.Publishable {
		if v != s.Sending {
			return v
		}
	}
	return ""
}

// IsPublishable reports whether a decoded status value means "publish me".
// A table without a status column publishes every inserted row.
func (t *Table) IsPublishable(v any) bool {
	if t.Columns.Status == "" {
		return true
	}
	s := colval.ValueString(v)
	for _, p := range t.Statuses.Publishable {
		if s == p {
			return true
		}
	}
	return false
}

// Location is the zone of route.time_zone (UTC when unset or not yet
// validated).
func (t *Table) Location() *time.Location {
	if t.loc == nil {
		return time.UTC
	}
	return t.loc
}
