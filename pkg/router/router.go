// Package router turns an outbox row into an AMQP message: exchange, routing
// key, message id, properties and headers, all from the table's mapping.
package router

import (
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/pkg/outbox"
)

// Message is a routed row ready to publish.
type Message struct {
	Row        *outbox.Row
	Exchange   string
	RoutingKey string
	Publishing amqp.Publishing
}

// ErrNoRoute marks a row that cannot be routed (no exchange, a template
// column that is NULL). Such a row is a failure with this reason, never a
// crash.
var ErrNoRoute = errors.New("no route")

// Router routes rows of a set of tables. Templates are parsed once.
type Router struct {
	tables map[*outbox.Table]*tableRoute
	// AppID is set on every message (the relay's name).
	AppID string
}

type tableRoute struct {
	exchange    outbox.Template
	routingKey  outbox.Template
	contentType string
}

// New parses the routes of the tables (already validated).
func New(tables []*outbox.Table, appID string) (*Router, error) {
	r := &Router{tables: map[*outbox.Table]*tableRoute{}, AppID: appID}
	for _, t := range tables {
		ex, err := outbox.ParseTemplate(t.Route.Exchange)
		if err != nil {
			return nil, fmt.Errorf("table %s route.exchange: %w", t.FullName(), err)
		}
		rk, err := outbox.ParseTemplate(t.Route.RoutingKey)
		if err != nil {
			return nil, fmt.Errorf("table %s route.routing_key: %w", t.FullName(), err)
		}
		ct := t.Route.ContentType
		if ct == "" {
			ct = "application/json"
		}
		r.tables[t] = &tableRoute{exchange: ex, routingKey: rk, contentType: ct}
	}
	return r, nil
}

// Route builds the message for a row.
func (r *Router) Route(row *outbox.Row) (*Message, error) {
	t := row.Table
	tr := r.tables[t]
	if tr == nil {
		return nil, fmt.Errorf("%w: table %s is not configured", ErrNoRoute, t.FullName())
	}
	exchange, err := r.exchange(row, tr)
	if err != nil {
		return nil, err
	}
	rk, missing := tr.routingKey.Render(row.Get)
	if missing != "" {
		return nil, fmt.Errorf("%w: routing key column %q is NULL or missing", ErrNoRoute, missing)
	}
	msgID := MessageID(row)
	pub := amqp.Publishing{
		MessageId:    msgID,
		ContentType:  tr.contentType,
		DeliveryMode: amqp.Persistent,
		Timestamp:    time.Now().UTC(),
		AppId:        r.AppID,
		Body:         outbox.ValueBytes(row.Values[t.Columns.Payload]),
	}
	if len(t.Columns.Headers) > 0 {
		pub.Headers = amqp.Table{}
		for _, h := range t.Columns.Headers {
			if v, ok := row.Values[h]; ok && v != nil {
				pub.Headers[h] = outbox.ValueString(v)
			}
		}
	}
	return &Message{Row: row, Exchange: exchange, RoutingKey: rk, Publishing: pub}, nil
}

func (r *Router) exchange(row *outbox.Row, tr *tableRoute) (string, error) {
	t := row.Table
	if len(t.Route.ExchangeMap) > 0 {
		key := outbox.ValueString(row.Values[t.Route.ExchangeMapColumn])
		if ex, ok := t.Route.ExchangeMap[key]; ok {
			return ex, nil
		}
		if tr.exchange.Empty() {
			return "", fmt.Errorf("%w: %s=%q has no entry in route.exchange_map", ErrNoRoute, t.Route.ExchangeMapColumn, key)
		}
	}
	ex, missing := tr.exchange.Render(row.Get)
	if missing != "" {
		return "", fmt.Errorf("%w: exchange column %q is NULL or missing", ErrNoRoute, missing)
	}
	if ex == "" {
		return "", fmt.Errorf("%w: the exchange is empty", ErrNoRoute)
	}
	return ex, nil
}

// MessageID is the AMQP message-id of a row: its message id column, or
// "schema.table:id" when the table has none.
func MessageID(row *outbox.Row) string {
	t := row.Table
	if t.Columns.MessageID != "" {
		if v, ok := row.Values[t.Columns.MessageID]; ok && v != nil {
			return outbox.ValueString(v)
		}
	}
	return t.FullName() + ":" + outbox.ValueString(row.ID)
}
