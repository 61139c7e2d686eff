// Package order is the order service of the example: it writes an order and the
// outbox row announcing it in one local transaction, so the event exists if and only
// if the order does.
package order

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// Event routing of order.created: the outbox row names the exchange and routing key,
// and the relay publishes it there.
const (
	Exchange   = "orders" // default; tests use their own
	RoutingKey = "order.created"
)

// Created is the body of an order.created event.
type Created struct {
	OrderNo  string `json:"order_no"`
	SKU      string `json:"sku"`
	Quantity int    `json:"quantity"`
}

// Service places orders.
type Service struct {
	db       *sql.DB
	exchange string
}

// New returns a Service writing to db (the primary) whose events go to exchange.
func New(db *sql.DB, exchange string) *Service { return &Service{db: db, exchange: exchange} }

// Place writes the order and its outbox row in one transaction and returns the event's
// message id.
func (s *Service) Place(ctx context.Context, sku string, quantity int) (Created, string, error) {
	if sku == "" || quantity <= 0 {
		return Created{}, "", errors.New("placing order: need a sku and a positive quantity")
	}
	ev := Created{OrderNo: "ord-" + randomHex(12), SKU: sku, Quantity: quantity}
	messageID := randomHex(16)
	body, err := json.Marshal(ev)
	if err != nil {
		return Created{}, "", fmt.Errorf("encoding order event: %w", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Created{}, "", fmt.Errorf("beginning order transaction: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (order_no, sku, quantity) VALUES (?, ?, ?)`,
		ev.OrderNo, ev.SKU, ev.Quantity); err != nil {
		return Created{}, "", fmt.Errorf("inserting order %s: %w", ev.OrderNo, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO producer_message (message_id, exchange, routing_key, content)
		VALUES (?, ?, ?, ?)`, messageID, s.exchange, RoutingKey, string(body)); err != nil {
		return Created{}, "", fmt.Errorf("inserting outbox row of order %s: %w", ev.OrderNo, err)
	}
	if err := tx.Commit(); err != nil {
		return Created{}, "", fmt.Errorf("committing order %s: %w", ev.OrderNo, err)
	}
	return ev, messageID, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
