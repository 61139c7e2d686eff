// Package outbox describes an outbox table as the relay sees it: which columns
// hold the id, message id, route, payload and bookkeeping, which status values
// mean what, and how a row is routed. Every other stage (binlog reader,
// router, status writer, sweeper, start-up checks) works from a Table.
package outbox

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Columns maps the relay's notions to the table's column names. An empty name
// means the table has no such column: the relay then neither reads nor writes it.
type Columns struct {
	ID            string   `yaml:"id"`
	MessageID     string   `yaml:"message_id"`
	Exchange      string   `yaml:"exchange"`
	RoutingKey    string   `yaml:"routing_key"`
	Payload       string   `yaml:"payload"`
	Status        string   `yaml:"status"`
	RetryCount    string   `yaml:"retry_count"`
	MaxRetryCount string   `yaml:"max_retry_count"`
	NextRetryTime string   `yaml:"next_retry_time"`
	Error         string   `yaml:"error"`
	CreatedAt     string   `yaml:"created_at"`
	UpdatedAt     string   `yaml:"updated_at"`
	Version       string   `yaml:"version"`
	Headers       []string `yaml:"headers"`
}

// Statuses holds the table's own status values, as they are written in SQL:
// strings ('PENDING') or numbers (0). Publishable lists the values that, on an
// inserted row, mean "publish me" (the seed producers insert SENDING too).
type Statuses struct {
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
	ContentType       string            `yaml:"content_type"`
}

// Table is one outbox table.
type Table struct {
	Schema   string   `yaml:"schema"`
	Name     string   `yaml:"name"`
	Preset   string   `yaml:"preset"`
	Columns  Columns  `yaml:"columns"`
	Statuses Statuses `yaml:"statuses"`
	Route    Route    `yaml:"route"`
	// MaxRetries applies when the table has no max retry column.
	MaxRetries int `yaml:"max_retries"`
}

var identRe = regexp.MustCompile(`^[A-Za-z0-9_$]+$`)

// CheckIdent refuses identifiers with characters outside [A-Za-z0-9_$], so
// every name the relay quotes into SQL is plain.
func CheckIdent(field, name string) error {
	if !identRe.MatchString(name) {
		return fmt.Errorf("%s: %q is not a valid identifier (use only A-Z a-z 0-9 _ $)", field, name)
	}
	return nil
}

// QuoteIdent quotes a validated identifier for MySQL.
func QuoteIdent(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// FullName is schema.table, unquoted, as used in logs and metrics.
func (t *Table) FullName() string { return t.Schema + "." + t.Name }

// QuotedName is `schema`.`table`.
func (t *Table) QuotedName() string { return QuoteIdent(t.Schema) + "." + QuoteIdent(t.Name) }

// Validate checks the table definition; field names the YAML path prefix.
func (t *Table) Validate(field string) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if t.Schema == "" {
		add(fmt.Errorf("%s.schema: required", field))
	} else {
		add(CheckIdent(field+".schema", t.Schema))
	}
	if t.Name == "" {
		add(fmt.Errorf("%s.name: required", field))
	} else {
		add(CheckIdent(field+".name", t.Name))
	}
	for name, col := range t.columnFields() {
		if col != "" {
			add(CheckIdent(field+".columns."+name, col))
		}
	}
	for i, h := range t.Columns.Headers {
		add(CheckIdent(fmt.Sprintf("%s.columns.headers[%d]", field, i), h))
	}
	if t.Columns.ID == "" {
		add(fmt.Errorf("%s.columns.id: required (the primary key the relay marks rows by)", field))
	}
	if t.Columns.Payload == "" {
		add(fmt.Errorf("%s.columns.payload: required", field))
	}
	if t.Columns.Status != "" {
		if t.Statuses.Sent == "" {
			add(fmt.Errorf("%s.statuses.sent: required when columns.status is set", field))
		}
		if len(t.Statuses.Publishable) == 0 {
			add(fmt.Errorf("%s.statuses.publishable: required when columns.status is set", field))
		}
		if t.Statuses.Numeric {
			for name, v := range map[string]string{"pending": t.Statuses.Pending, "sending": t.Statuses.Sending, "sent": t.Statuses.Sent, "failed": t.Statuses.Failed} {
				if v == "" {
					continue
				}
				if _, err := strconv.ParseInt(v, 10, 64); err != nil {
					add(fmt.Errorf("%s.statuses.%s: %q is not a number but statuses.numeric is true", field, name, v))
				}
			}
		}
	}
	if t.Route.Exchange == "" && t.Columns.Exchange == "" && len(t.Route.ExchangeMap) == 0 {
		add(fmt.Errorf("%s.route.exchange: set a fixed exchange, a template, an exchange_map or columns.exchange", field))
	}
	if len(t.Route.ExchangeMap) > 0 && t.Route.ExchangeMapColumn == "" {
		add(fmt.Errorf("%s.route.exchange_map_column: required with route.exchange_map", field))
	}
	if t.Route.ExchangeMapColumn != "" {
		add(CheckIdent(field+".route.exchange_map_column", t.Route.ExchangeMapColumn))
	}
	for _, tmpl := range []struct{ name, s string }{{"exchange", t.Route.Exchange}, {"routing_key", t.Route.RoutingKey}} {
		if _, err := ParseTemplate(tmpl.s); err != nil {
			add(fmt.Errorf("%s.route.%s: %w", field, tmpl.name, err))
		}
	}
	if t.MaxRetries < 0 {
		add(fmt.Errorf("%s.max_retries: must be >= 0", field))
	}
	return errors.Join(errs...)
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
	for _, tmpl := range []struct{ name, s string }{{"exchange", t.Route.Exchange}, {"routing_key", t.Route.RoutingKey}} {
		parsed, _ := ParseTemplate(tmpl.s)
		for _, col := range parsed.Columns() {
			out["route."+tmpl.name+" {"+col+"}"] = col
		}
	}
	return out
}

// SQLValue renders a status value for SQL: numbers bare, strings quoted.
func (s *Statuses) SQLValue(v string) string {
	if s.Numeric {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

// SQLList renders values as a comma-separated SQL list.
func (s *Statuses) SQLList(vs []string) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = s.SQLValue(v)
	}
	return strings.Join(parts, ", ")
}

// IsPublishable reports whether a decoded status value means "publish me".
// A table without a status column publishes every inserted row.
func (t *Table) IsPublishable(v any) bool {
	if t.Columns.Status == "" {
		return true
	}
	s := ValueString(v)
	for _, p := range t.Statuses.Publishable {
		if s == p {
			return true
		}
	}
	return false
}
