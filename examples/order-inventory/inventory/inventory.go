// Package inventory is the inventory service of the example: it deducts stock for each
// order.created event through pkg/inbox, so a redelivered event deducts nothing.
package inventory

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/binlog-relay/binlog-relay/examples/order-inventory/order"
	"github.com/binlog-relay/binlog-relay/pkg/inbox"
)

// Queue is the inventory service's queue (default name), bound to the orders exchange
// with order.RoutingKey.
const Queue = "inventory.order-created"

// QueueArgs declare Queue a quorum queue: replicated on a RabbitMQ cluster, and the queue
// type RabbitMQ recommends for data that must not be lost. Redelivery limits and
// dead-lettering come from a policy (deploy/docker/rabbitmq/definitions.json), which needs
// no matching declaration here.
var QueueArgs = amqp.Table{"x-queue-type": "quorum"}

// ErrInsufficientStock is returned (and retried with backoff) when a SKU runs short;
// a restock before the retries run out lets the order through.
var ErrInsufficientStock = errors.New("insufficient stock")

// Deduct is the inbox handler: it deducts the ordered quantity and records the
// movement, inside the inbox's transaction.
func Deduct(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
	var ev order.Created
	if err := json.Unmarshal(m.Body, &ev); err != nil {
		return inbox.Malformed(fmt.Errorf("decoding order.created: %w", err))
	}
	if ev.OrderNo == "" || ev.SKU == "" || ev.Quantity <= 0 {
		return inbox.Malformed(fmt.Errorf("order.created needs order_no, sku and a positive quantity, got %+v", ev))
	}
	res, err := tx.ExecContext(ctx, `UPDATE stock SET quantity = quantity - ? WHERE sku = ? AND quantity >= ?`,
		ev.Quantity, ev.SKU, ev.Quantity)
	if err != nil {
		return fmt.Errorf("deducting %d of %s: %w", ev.Quantity, ev.SKU, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("deducting %d of %s: %w", ev.Quantity, ev.SKU, err)
	} else if n == 0 {
		return fmt.Errorf("order %s wants %d of %s: %w", ev.OrderNo, ev.Quantity, ev.SKU, ErrInsufficientStock)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO stock_movement (order_no, sku, quantity, message_id)
		VALUES (?, ?, ?, ?)`, ev.OrderNo, ev.SKU, -ev.Quantity, m.ID); err != nil {
		return fmt.Errorf("recording movement of order %s: %w", ev.OrderNo, err)
	}
	return nil
}

// DeclareTopology declares the orders exchange (topic) and the inventory queue (a
// durable quorum queue, QueueArgs), and binds them on order.RoutingKey. It is idempotent.
// A classic queue of that name left by an older version of the demo makes the broker
// refuse the declaration (406 PRECONDITION_FAILED, inequivalent arg 'x-queue-type'): the
// error says so.
func DeclareTopology(ch *amqp.Channel, exchange, queue string) error {
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declaring exchange %s: %w", exchange, err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, QueueArgs); err != nil {
		return fmt.Errorf("declaring queue %s as a quorum queue (a classic queue of that name from an older demo: delete it): %w", queue, err)
	}
	if err := ch.QueueBind(queue, order.RoutingKey, exchange, false, nil); err != nil {
		return fmt.Errorf("binding queue %s: %w", queue, err)
	}
	return nil
}

// Seed sets every SKU's stock (and its initial quantity) to quantity.
func Seed(ctx context.Context, db *sql.DB, skus []string, quantity int) error {
	for _, sku := range skus {
		if _, err := db.ExecContext(ctx, `INSERT INTO stock (sku, quantity, initial_quantity) VALUES (?, ?, ?)
			ON DUPLICATE KEY UPDATE quantity = VALUES(quantity), initial_quantity = VALUES(initial_quantity)`,
			sku, quantity, quantity); err != nil {
			return fmt.Errorf("seeding stock of %s: %w", sku, err)
		}
	}
	return nil
}

// Report compares the books: per SKU, what left the stock against what was ordered.
type Report struct {
	Orders, Movements, DistinctOrders int
	// Mismatches lists SKUs whose deducted quantity differs from the ordered quantity.
	Mismatches []string
}

// Consistent reports whether every order was deducted exactly once.
func (r Report) Consistent() bool {
	return len(r.Mismatches) == 0 && r.Orders == r.Movements && r.Movements == r.DistinctOrders
}

// Verify builds a Report. Orders whose event is still in flight show as mismatches, so
// call it once the queue has drained.
func Verify(ctx context.Context, db *sql.DB) (Report, error) {
	var r Report
	if err := db.QueryRowContext(ctx, `SELECT
			(SELECT COUNT(*) FROM orders),
			(SELECT COUNT(*) FROM stock_movement),
			(SELECT COUNT(DISTINCT order_no) FROM stock_movement)`).
		Scan(&r.Orders, &r.Movements, &r.DistinctOrders); err != nil {
		return r, fmt.Errorf("counting orders and movements: %w", err)
	}
	rows, err := db.QueryContext(ctx, `SELECT s.sku, s.initial_quantity - s.quantity,
			COALESCE((SELECT SUM(o.quantity) FROM orders o WHERE o.sku = s.sku), 0)
		FROM stock s ORDER BY s.sku`)
	if err != nil {
		return r, fmt.Errorf("comparing stock with orders: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var sku string
		var deducted, ordered int
		if err := rows.Scan(&sku, &deducted, &ordered); err != nil {
			return r, fmt.Errorf("comparing stock with orders: %w", err)
		}
		if deducted != ordered {
			r.Mismatches = append(r.Mismatches, fmt.Sprintf("%s: deducted %d, ordered %d", sku, deducted, ordered))
		}
	}
	return r, rows.Err()
}
