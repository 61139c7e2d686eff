// Package demo is the one-shot of the Compose demo (docker-compose.yml): it places a few
// orders through the order service, waits until the inventory service has handled each
// one's event, and prints what the consumer received.
package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/binlog-relay/binlog-relay/examples/order-inventory/inventory"
	"github.com/binlog-relay/binlog-relay/examples/order-inventory/order"
)

// Options of a run.
type Options struct {
	Orders   int           // orders to place
	Exchange string        // the outbox rows' exchange (order.Exchange)
	Consumer string        // the inventory service's inbox consumer name
	Wait     time.Duration // how long to wait for the consumer
	Poll     time.Duration // how often to look (default 500ms)
}

type placed struct {
	ev        order.Created
	messageID string
}

// Run places the orders on db (the primary), waits for the inventory service's inbox to
// hold a SUCCESS row for each event, and writes one line per order received, the outbox
// statuses and the books. It fails when an event has not been handled within Wait, and
// then says where each missing one is.
func Run(ctx context.Context, db *sql.DB, o Options, out io.Writer) error {
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	skus, err := stockedSKUs(ctx, db, o.Wait)
	if err != nil {
		return err
	}
	svc := order.New(db, o.Exchange)
	var orders []placed
	for range o.Orders {
		ev, id, err := svc.Place(ctx, skus[rand.IntN(len(skus))], 1+rand.IntN(3))
		if err != nil {
			return err
		}
		orders = append(orders, placed{ev, id})
		fmt.Fprintf(out, "placed   %s: %d x %s (outbox row %s to exchange %s)\n", ev.OrderNo, ev.Quantity, ev.SKU, id, o.Exchange)
	}
	ids := make([]string, len(orders))
	for i, p := range orders {
		ids[i] = p.messageID
	}
	got, err := waitReceived(ctx, db, o, ids)
	if err != nil {
		return err
	}
	for _, p := range orders {
		if r, ok := got[p.messageID]; ok && r.status == "SUCCESS" {
			fmt.Fprintf(out, "received %s by %s from %s/%s: %s\n", p.messageID, o.Consumer, r.exchange, r.routingKey, r.body)
		}
	}
	outbox, err := outboxStatuses(ctx, db, ids)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "outbox rows of these orders: %s\n", outbox)
	rep, err := inventory.Verify(ctx, db)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "books: %d orders, %d stock movements, %d mismatches\n", rep.Orders, rep.Movements, len(rep.Mismatches))
	if missing := missingOf(orders, got); len(missing) > 0 {
		return fmt.Errorf("%d of %d orders not handled by %s within %s: %s", len(missing), len(orders), o.Consumer, o.Wait,
			explain(ctx, db, missing))
	}
	if !rep.Consistent() {
		return fmt.Errorf("the books do not balance: %s", strings.Join(rep.Mismatches, "; "))
	}
	fmt.Fprintf(out, "all %d orders received once and deducted\n", len(orders))
	return nil
}

// stockedSKUs waits for the database (the demo may start before it answers) and reads the
// SKUs that have stock.
func stockedSKUs(ctx context.Context, db *sql.DB, wait time.Duration) ([]string, error) {
	deadline := time.Now().Add(wait)
	for {
		rows, err := db.QueryContext(ctx, "SELECT sku FROM stock WHERE quantity > 100 ORDER BY sku")
		if err == nil {
			var skus []string
			for rows.Next() {
				var s string
				if err = rows.Scan(&s); err != nil {
					break
				}
				skus = append(skus, s)
			}
			rows.Close()
			if err == nil && len(skus) > 0 {
				return skus, nil
			}
			if err == nil {
				err = errors.New("no SKU has stock: seed the stock table")
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("reading the stock: %w", err)
		}
		time.Sleep(time.Second)
	}
}

type received struct {
	status, exchange, routingKey, body string
}

// waitReceived polls until every id is SUCCESS in the inbox and SENT in the outbox (the
// relay marks rows SENT in batches, after the broker's confirm: the consumer may be
// first), or Wait has passed.
func waitReceived(ctx context.Context, db *sql.DB, o Options, ids []string) (map[string]received, error) {
	deadline := time.Now().Add(o.Wait)
	for {
		got, err := inboxRows(ctx, db, o.Consumer, ids)
		if err != nil {
			return nil, err
		}
		done := 0
		for _, r := range got {
			if r.status == "SUCCESS" {
				done++
			}
		}
		sent, err := outboxStatuses(ctx, db, ids)
		if err != nil {
			return nil, err
		}
		if (done == len(ids) && sent == fmt.Sprintf("SENT %d", len(ids))) || time.Now().After(deadline) {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(o.Poll):
		}
	}
}

func inboxRows(ctx context.Context, db *sql.DB, consumer string, ids []string) (map[string]received, error) {
	q := "SELECT message_id, status, exchange, routing_key, content FROM consumer_message WHERE consumer = ? AND message_id IN (" +
		placeholders(len(ids)) + ")"
	rows, err := db.QueryContext(ctx, q, append([]any{consumer}, anys(ids)...)...)
	if err != nil {
		return nil, fmt.Errorf("reading the inbox: %w", err)
	}
	defer rows.Close()
	got := map[string]received{}
	for rows.Next() {
		var id string
		var r received
		if err := rows.Scan(&id, &r.status, &r.exchange, &r.routingKey, &r.body); err != nil {
			return nil, fmt.Errorf("reading the inbox: %w", err)
		}
		got[id] = r
	}
	return got, rows.Err()
}

// outboxStatuses counts the outbox rows of ids by status ("SENT 5").
func outboxStatuses(ctx context.Context, db *sql.DB, ids []string) (string, error) {
	rows, err := db.QueryContext(ctx, "SELECT status, COUNT(*) FROM producer_message WHERE message_id IN ("+
		placeholders(len(ids))+") GROUP BY status ORDER BY status", anys(ids)...)
	if err != nil {
		return "", fmt.Errorf("reading the outbox: %w", err)
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var status string
		var n int
		if err := rows.Scan(&status, &n); err != nil {
			return "", fmt.Errorf("reading the outbox: %w", err)
		}
		parts = append(parts, fmt.Sprintf("%s %d", status, n))
	}
	return strings.Join(parts, ", "), rows.Err()
}

func missingOf(orders []placed, got map[string]received) []string {
	var missing []string
	for _, p := range orders {
		if got[p.messageID].status != "SUCCESS" {
			missing = append(missing, p.messageID)
		}
	}
	sort.Strings(missing)
	return missing
}

// explain says where each missing event is: still PENDING in the outbox (the relay has not
// sent it), FAILED with the broker's reason, or SENT but not yet handled.
func explain(ctx context.Context, db *sql.DB, ids []string) string {
	rows, err := db.QueryContext(ctx, "SELECT message_id, status, COALESCE(error_msg, '') FROM producer_message WHERE message_id IN ("+
		placeholders(len(ids))+") ORDER BY message_id", anys(ids)...)
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var parts []string
	for rows.Next() {
		var id, status, msg string
		if rows.Scan(&id, &status, &msg) != nil {
			break
		}
		switch {
		case msg != "":
			parts = append(parts, fmt.Sprintf("%s outbox %s (%s)", id, status, msg))
		case status == "SENT":
			parts = append(parts, id+" outbox SENT, not handled yet (is the inventory service running?)")
		default:
			parts = append(parts, fmt.Sprintf("%s outbox %s (is the relay running? docker compose logs relay)", id, status))
		}
	}
	return strings.Join(parts, "; ")
}

func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
